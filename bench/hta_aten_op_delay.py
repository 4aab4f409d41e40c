"""HTA's get_aten_op_kernels_and_delay: the reference for ft's (tests/data/hta_aten_op_delay.json).

usage: /usr/bin/python3 bench/hta_aten_op_delay.py HTA_SRC TRACES_ROOT OUT.json KEY ...
Runs HTA (Debian's pandas; its plot switched off) on every rank of TRACES_ROOT/KEY and writes
{KEY: {rank: [rows]}}; a KEY on which HTA raises gets {"error": ...}.
"""
import json
import logging
import os
import sys


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    logging.disable(logging.CRITICAL)
    sys.path.insert(0, sys.argv[1])
    from hta.trace_analysis import TraceAnalysis  # noqa: E402
    import hta.analyzers.cuda_kernel_analysis as cka  # noqa: E402
    cka.CudaKernelAnalysis.visualize_aten_op_kernels_and_overhead = classmethod(
        lambda cls, *a, **k: None)
    out = {}
    for key in sys.argv[4:]:
        try:
            a = TraceAnalysis(trace_dir=os.path.join(sys.argv[2], key))
            res = a.get_aten_op_kernels_and_delay(ranks=sorted(a.t.traces.keys()))
            out[key] = {str(r): [{k: (v.item() if hasattr(v, "item") else v)
                                  for k, v in row.items()}
                                 for row in df.to_dict("records")] for r, df in res.items()}
        except Exception as e:  # noqa: BLE001
            out[key] = {"error": repr(e)}
    with open(sys.argv[3], "w") as f:
        json.dump(out, f, indent=None, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()

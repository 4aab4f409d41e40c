// ft_hta_main.cpp: ft-hta, HTA-compatible analyses of a PyTorch profiler trace (file or rank dir).
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/profiler/critical_path.h"
#include "ft/profiler/hta.h"
#include "ft/profiler/kineto_reader.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  try {
    po::options_description opts("ft-hta TRACE_FILE|TRACE_DIR --hta-json FILE [options]");
    std::string trace, out, root, memory;
    ft::profiler::CriticalPathOptions cp;
    ft::profiler::HtaOptions hta;
    ft::profiler::KernelSequenceOptions seq;
    opts.add_options()("help,h", "show this help")(
        "trace", po::value<std::string>(&trace), "Kineto trace file (.json/.json.gz) or rank dir")(
        "hta-json", po::value<std::string>(&out), "write the HTA-compatible analyses here")(
        "traces-root", po::value<std::string>(&root),
        "key the entry by the trace's directory relative to this root (e.g. trace_diff/control)")(
        "max-queue-length", po::value<int64_t>(&hta.max_queue_length)->default_value(1024),
        "time blocked on a full launch queue: the queue's length (CUDA's per stream: 1024)")(
        "no-time-series", "leave out the queue-length and memory-bandwidth time series")(
        "memory-timeline", po::value<std::string>(&memory),
        "also HTA's MemoryAnalysis of this PyTorch memory timeline export (raw .json[.gz])")(
        "sequence-operator",
        po::value<std::string>(&seq.operator_name)->default_value(seq.operator_name),
        "frequent CUDA kernel sequences: root CPU ops are those whose name holds this")(
        "sequence-min-length", po::value<size_t>(&seq.min_pattern_len)->default_value(3),
        "frequent CUDA kernel sequences: the fewest kernels a root op launches")(
        "cp-annotation", po::value<std::string>(&cp.annotation)->default_value("ProfilerStep"),
        "critical path: window annotation (\"\" = whole rank)")(
        "cp-instance", po::value<int64_t>(&cp.instance_first)->default_value(0),
        "critical path: 0-based instance of the annotation")(
        "cp-zero-weight-launch-edges", po::bool_switch(&cp.add_zero_weight_launch_edges),
        "critical path: as CRITICAL_PATH_ADD_ZERO_WEIGHT_LAUNCH_EDGE=1");
    po::positional_options_description pos;
    pos.add("trace", 1);
    po::variables_map vm;
    try {
      po::store(po::command_line_parser(argc, argv).options(opts).positional(pos).run(), vm);
      po::notify(vm);
    } catch (const po::error& e) {
      throw ft::ConfigError(std::string("ft-hta: ") + e.what());
    }
    if (vm.count("help")) {
      std::cout << opts << "\n";
      return 0;
    }
    if (trace.empty()) throw ft::ConfigError("ft-hta: missing TRACE_FILE|TRACE_DIR");
    if (out.empty()) throw ft::ConfigError("ft-hta: missing --hta-json FILE");
    nlohmann::json doc;
    const std::string key = ft::profiler::hta_entry_key(trace, root);
    hta.time_series = vm.count("no-time-series") == 0;
    if (seq.operator_name.empty())
      throw ft::ConfigError("ft-hta: --sequence-operator must not be empty");
    if (hta.max_queue_length < 1) throw ft::ConfigError("ft-hta: --max-queue-length must be >= 1");
    cp.instance_last = cp.instance_first;
    doc[key] = ft::profiler::hta_entry(trace, hta, cp, seq);
    if (!memory.empty()) doc[key]["memory_timeline"] = ft::profiler::hta_memory_timeline(memory);
    ft::write_file_atomic(out,
                          doc.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    return 0;
  } catch (const ft::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const ft::Error& e) {
    std::fprintf(stderr, "ft-hta: %s\n", e.what());
    return 1;
  }
}

// step_replay.h: the training rank's dependency graph (host threads' call chains, launch ->
// device op, stream order, blocking calls) re-run with a cause removed or reduced: the what-if
// behind each finding's predicted step time (issue 19 item 4). Internal to profiler/classify.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ft/profiler/diagnosis.h"
#include "ft/profiler/event.h"
#include "ft/profiler/findings.h"

namespace ft::profiler::replay {

// What changes in a replay. Each field is one finding's fix (docs/classification.md,
// "Predictions").
struct WhatIf {
  bool no_data = false;        // loader spans take no time
  bool no_alloc = false;       // allocator calls take no time; cudaFree no longer drains the device
  bool no_readback = false;    // blocking read-backs and syncs leave the step
  bool pinned_copies = false;  // pageable/synchronous uploads: an asynchronous call (a launch's
                               // cost) with no stream sync after it; the copy stays on its stream
                               // at the trace's pinned rate, else pinned_speedup times faster
  double pinned_speedup = 1.0;
  bool graphs = false;         // CUDA-graph replay: the captured host pieces (runtime calls,
                               // framework operators, short dispatch glue) take no time; user
                               // Python, the loader, the allocator and blocking calls stay;
                               // kernels start kGraphNodeGapNs after the last on their stream
  double gemm_speedup = 1.0;   // SIMT fp32 GEMM kernels run this much faster
  bool remove_marked = false;  // the pieces StepGraph::mark_spans marked take no time
  bool no_late_ranks = false;  // a collective's wait for the ranks that arrive late ("comm sync:
                               // NAME", split off by the cross-rank match) takes no time
  bool overlap_comm = false;   // each collective starts with its step's first device op (as
                               // soon as its stream allows), beside the compute before its consumer
  bool no_cpu_work = false;    // the CPU operators flagged kCpuWork run off the training thread
                               // (loader workers, ahead of the step): they take no time on it
  bool operator==(const WhatIf&) const = default;
};

// One device node after another in a CUDA graph replay (a kernel node's launch on the device).
inline constexpr int64_t kGraphNodeGapNs = 1000;
// An op that starts this soon (or within the launch latency) after an op on another stream ends,
// later than its launch and stream allow, waits for that op (cudaStreamWaitEvent).
inline constexpr int64_t kCrossStreamLagNs = 20000;

class StepGraph {
 public:
  // Builds the graph of the training thread `main`, the other host threads of its process that
  // launch work on `device_pid`, and that device's busy spans. Host time is a chain per thread of
  // innermost spans; a thread other than the training thread starts each stretch of traced work
  // where the training thread was at that instant (the training thread hands work to it, e.g. the
  // autograd engine's device thread). A device op starts at max(its launch + the launch latency,
  // the end of the previous op on its stream, and the end of an op on another stream it waited
  // for (an op starting later than both, right after one ends elsewhere: cudaStreamWaitEvent),
  // plus any delay the trace shows beyond these; an op without a launch (no correlation) follows
  // its stream's previous op, or the device's, at the traced distance; a blocking call returns when
  // the op it waits for ends plus its own return time. Only events overlapping [lo, hi) take part.
  // Returns false when there is nothing to replay (no busy device span there).
  bool build(const Trace& trace, const Track& main, uint32_t device_pid, int64_t lo, int64_t hi);

  // Re-runs the whole graph under `w` and returns each window's length in ns: window [lo, hi) in
  // the trace's times, mapped through the replayed times of the events that bound it (a device
  // op starting or ending there, else the training thread's position).
  std::vector<int64_t> replay(const std::vector<std::pair<int64_t, int64_t>>& windows,
                              const WhatIf& w) const;

  // The device's idle time inside `windows` charged by the graph, per WaitClass: each idle
  // stretch to what held back the op that ends it (the critical path into it). Its launch: the
  // launch call and the host chain that led to it, piece by piece (a blocking call its blocking
  // class), down to the stretch's start; a wait on another stream: comm after a collective, else
  // sync; a delay the trace does not explain: other. Issue 19's check of the instant rule.
  struct IdleByCause {
    std::array<int64_t, kNumWaitClasses> ns{};
    int64_t unlinked_ns = 0;  // of `other`: ended by an op with no launch linked to it
  };
  IdleByCause attribute_idle(const std::vector<std::pair<int64_t, int64_t>>& windows) const;

  // Marks the host pieces inside spans named `name` on their own thread (what remove_marked
  // removes: a straggler's extra work). Returns how many pieces it marked.
  size_t mark_spans(const Trace& trace, const std::string& name);

  size_t pieces() const { return pieces_.size(); }
  size_t ops() const { return ops_.size(); }
  bool has_simt_gemms() const { return simt_gemms_; }
  // The fastest pinned host-to-device copy of at least 1 MiB, bytes per ns (0: none traced).
  double pinned_rate() const { return pinned_rate_; }
  // The share of the device's busy time in ops linked to their launch call (correlation id): an
  // op without one keeps its place after the op before it, so host-side changes cannot move it.
  double linked_share() const { return linked_share_; }

 private:
  // A stretch of one host thread under one innermost span.
  // 32 bytes: a 54 MB trace's steady steps hold ~150k of them.
  struct Piece {
    int64_t a = 0, b = 0;
    int32_t wait = -1;     // blocking: its entry in waits_, else -1
    uint16_t thread = 0;   // 0: the training thread (kMaxThreads chains at most)
    uint8_t cls : 4;       // WaitClass of the innermost span (host for untraced code)
    bool untraced : 1;     // no span covers it
    uint8_t block : 5;     // WaitClass + 1 of a blocking call that ends here, else 0
    bool burst_first : 1;  // first piece after untraced time on another thread
    bool captured : 1;     // a CUDA graph would capture it (step_replay.cpp, captured())
    bool cpu_work : 1;     // under a CPU operator flagged kCpuWork (no device work)
    Piece()
        : cls(0), untraced(false), block(0), burst_first(false), captured(false), cpu_work(false) {}
  };
  static_assert(sizeof(Piece) == 24, "a graph holds ~150k pieces: keep them at 24 bytes");
  // What a blocking piece waited for (few pieces block: kept beside them, not in each).
  struct Wait {
    int32_t op;   // the device op the call waited for (or, for a launch into a full queue, whose
                  // end freed a slot)
    int64_t ret;  // from that op's end to the call's return
  };
  static_assert(kNumWaitClasses < 16, "Piece::cls holds a WaitClass in 4 bits");
  static_assert(kNumWaitClasses < 31, "Piece::block holds a WaitClass + 1 in 5 bits");
  static constexpr size_t kMaxThreads = 65535;
  struct Op {
    int64_t ts = 0, dur = 0;
    int64_t anchor_off = 0;   // launch call's start - anchor piece's start
    int64_t launch_dur = 0;   // the launch call's own length
    int64_t delta = 0;        // launch latency (op start - launch start) it keeps
    int64_t gap = 0;          // delay beyond launch and stream order (cross-stream waits)
    int32_t anchor = -1;      // piece the launch call starts in, -1: none
    int32_t prev = -1;        // previous op on the stream
    uint64_t bytes = 0;       // copies: bytes moved
    int32_t dep = -1;         // op on another stream it waited for (event wait), -1: none
    int64_t dep_lag = 0;      // from that op's end to this op's start
    int32_t step_first = -1;  // the first op of its step (by Event::step), -1: unknown
    bool simt_gemm = false;
    bool rank_wait = false;  // "comm sync: NAME": the part of a collective waiting for late ranks
    bool collective = false;
    bool pageable_upload = false;
  };
  // The build's steps (step_graph_build.cpp), sharing the device ops and the id maps in Build.
  struct Build;
  bool collect_ops(Build& b, uint32_t device_pid, int64_t lo, int64_t hi);
  void build_pieces(Build& b, const Track& main, int64_t lo, int64_t hi);
  Piece host_piece(Build& b, const Event* ev, int64_t a, int64_t bnd);
  void link_ops(Build& b);
  void find_stream_waits(const Build& b);
  void order_items();

  struct State;
  int64_t main_at(State& s, int64_t t) const;
  int64_t start_of(State& s, int32_t piece) const;
  void replay_piece(State& s, int32_t i, const WhatIf& w) const;
  void replay_op(State& s, int32_t i, const WhatIf& w) const;
  int64_t map_time(State& s, int64_t t) const;

  std::vector<Piece> pieces_;   // by thread, then time; each thread's pieces contiguous
  std::vector<Wait> waits_;     // of the blocking pieces, in their order
  std::vector<Op> ops_;         // by start
  std::vector<int32_t> order_;  // processing order: a piece i >= 0 at its end, an op -1 - i at
                                // its start (a piece first on a tie)
  std::vector<int32_t> ops_by_end_;
  std::vector<uint32_t> tids_;                           // each chain's thread
  std::vector<std::pair<size_t, size_t>> thread_range_;  // each chain's pieces
  uint32_t pid_ = 0;                                     // the training process
  std::vector<bool> marked_;                             // mark_spans
  int64_t latency_ns_ = 0, launch_cost_ns_ = 0;
  double linked_share_ = 0;
  double pinned_rate_ = 0;
  bool simt_gemms_ = false;
};

// The first steady steps of a trace's training rank, ready to re-run (predict_replay.cpp).
class StepReplay {
 public:
  static constexpr size_t kMaxSteps = 8;          // the first steady steps re-run
  static constexpr double kMinLinkedShare = 0.5;  // of the busy time, in ops linked to a launch

  // Builds the graph of the first steady steps (and the step before them, whose launches may
  // feed them). usable() is false, and why() says why, when the training rank has no busy
  // device, the unchanged graph misses the traced steps by over 1%, or under kMinLinkedShare of
  // the device's busy time is in ops linked to their launch.
  StepReplay(const Trace& trace, const std::vector<const StepBreakdown*>& steady);

  bool has_device() const { return has_device_; }
  bool usable() const { return why_.empty() && has_device_; }
  const std::string& why() const { return why_; }
  // What `w` saves per step (ms): the unchanged re-run's mean minus `w`'s, at least 0, at most
  // the step.
  double saving_ms(const WhatIf& w) const;
  double step_ms() const { return step_ms_; }  // the mean steady step, all steady steps
  // StepGraph::attribute_idle over the re-run steps, ms per step; and the instant rule's
  // (the partition's "device.idle.<class>" details) over the same steps.
  std::array<double, kNumWaitClasses> graph_idle_ms(double* unlinked_ms = nullptr) const;
  const std::array<double, kNumWaitClasses>& instant_idle_ms() const { return instant_idle_; }
  double idle_ms() const { return idle_ms_; }          // device idle + exposed copies/collectives
  const std::string& steps() const { return steps_; }  // "steps 3-5"
  StepGraph& graph() { return graph_; }
  const StepGraph& graph() const { return graph_; }

 private:
  StepGraph graph_;
  std::vector<std::pair<int64_t, int64_t>> windows_;
  double base_ms_ = 0, step_ms_ = 0, idle_ms_ = 0;
  std::array<double, kNumWaitClasses> instant_idle_{};
  std::string steps_, why_;
  bool has_device_ = false;
};

// On `run` (built beforehand: diagnose() builds it beside the rules), when the training rank has
// a busy device, replaces the predictions of the findings
// whose fix the step graph can express (data, memory, sync, pcie, host, comm, and precision when
// SIMT fp32 GEMMs run) by a re-run of the graph of the first steady steps (at most 8) with that
// cause removed or reduced (docs/classification.md, "Predictions"): host threads' call chains,
// launch -> device op, stream order, cross-stream waits, blocking calls. Each prediction is its
// fix alone; the text adds what it saves after the fixes ranked above it (those increments sum
// to all the fixes together). When the unchanged graph does not reproduce the traced steps
// within 1%, or under half the device's busy time is in ops linked to their launch, the rule's
// estimates stay and each prediction says why. Rule estimates left (a straggler) are scaled to
// the device time the re-run fixes leave.
void replay_predictions(const StepReplay& run, std::vector<Finding>* findings,
                        const FindingRules& rules);

}  // namespace ft::profiler::replay

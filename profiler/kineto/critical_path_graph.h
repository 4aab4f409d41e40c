// critical_path_graph.h: HTA's critical-path graph (nodes, typed edges, longest path).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "critical_path_rows.h"
#include "ft/profiler/critical_path.h"

namespace ft::profiler::kineto {

enum class CpEdgeType : uint8_t {
  kOperator,
  kDependency,
  kLaunchDelay,
  kKernelKernelDelay,
  kSyncDependency
};
const char* cp_edge_type_name(CpEdgeType t);

struct CpNode {
  int64_t row = 0;  // position in CpTrace::rows
  int64_t ts = 0;
  bool is_start = true;
  bool blocking = false;
};

struct CpEdge {
  int u = 0;
  int v = 0;
  CpEdgeType type = CpEdgeType::kOperator;
  int64_t weight = 0;        // as computed (may be negative)
  int64_t graph_weight = 0;  // what the longest path maximises (negatives set to 0)
  int64_t attributed = -2;   // row position; -1 = the call-stack root; -2 = none
};

class CpGraph {
 public:
  CpGraph(const CpTrace& trace, std::vector<int64_t> clipped, const CriticalPathOptions& options);

  bool validate();                  // HTA's _validate_graph
  std::vector<int> longest_path();  // networkx dag_longest_path; empty on a cycle
  const CpEdge& edge(int u, int v) const { return edges_[edge_index_.at(key(u, v))]; }
  const std::vector<CpEdge>& edges() const { return edges_; }
  const std::vector<CpNode>& nodes() const { return nodes_; }
  size_t graph_nodes() const { return node_order_.size(); }
  size_t no_edge_added_warnings() const { return no_edge_added_; }
  const CpTrace& trace() const { return trace_; }

 private:
  static uint64_t key(int u, int v) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(u)) << 32) | static_cast<uint32_t>(v);
  }
  void create_nodes();
  int add_edge(int src, int dst, CpEdgeType type, bool zero_weight = false);
  void attribute(int e, int64_t src_parent);
  bool is_lock_node(int n) const;
  bool shares_lock(int a, int b) const;
  void add_runtime_lock_edges();
  void add_call_stack_edges();
  void walk_call_stack(const std::vector<int64_t>& rows);
  void add_kernel_edges();
  void add_sync_edges(const CpRow& sync, std::map<int64_t, int>* last_end,
                      std::unordered_map<int64_t, int64_t>* kernel_sync);
  void add_kernel(int64_t row, std::map<int64_t, int>* last_end,
                  std::unordered_map<int64_t, int64_t>* kernel_sync);
  std::vector<int64_t> stream_order_;  // streams in the order they got a last kernel

  const CpTrace& trace_;
  std::vector<int64_t> clipped_;  // row positions, in row order
  const CriticalPathOptions& options_;
  std::vector<CpNode> nodes_;
  std::vector<int> start_of_, end_of_;  // per row: node id or -1
  std::vector<CpEdge> edges_;
  std::unordered_map<uint64_t, int> edge_index_;
  std::vector<int> node_order_;  // networkx node order: first appearance in an edge
  std::vector<char> in_graph_;
  std::vector<std::vector<int>> succ_, pred_;  // edge ids, insertion order
  std::vector<int64_t> queue_;                 // per row: queue length after it, or INT64_MIN
  std::unordered_map<int64_t, int64_t> prev_launch_of_record_;  // record correlation -> launch
  std::vector<int64_t> next_launch_of_wait_;  // per row (cudaStreamWaitEvent): launch row or -1
  size_t no_edge_added_ = 0;
};

// Queue length per row over the whole rank (INT64_MIN where HTA has none), and the launch
// matching HTA does for cudaEventRecord / cudaStreamWaitEvent.
std::vector<int64_t> cp_queue_lengths(const CpTrace& t);
// prev_launch_of_record: the cudaEventRecord's correlation -> the row of the launch before it
// onto the recorded stream; next_launch_of_wait: per cudaStreamWaitEvent row, the row of the
// next launch from its thread onto the waiting stream (-1 = none).
void cp_match_event_launches(const CpTrace& t,
                             std::unordered_map<int64_t, int64_t>* prev_launch_of_record,
                             std::vector<int64_t>* next_launch_of_wait);
bool cp_is_launch(const std::string& name);

}  // namespace ft::profiler::kineto

// device_attribution.h: the device-centric partition of one step (issue 19): the accelerator's
// busy time by kind, and each idle stretch charged to what kept the host from queueing work.
// Internal to profiler/classify (partition.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ft/profiler/classifier.h"

namespace ft::profiler::device_attribution {

// One stretch of the training thread's timeline and the innermost span covering it (null: the
// thread ran nothing traced there).
struct HostPiece {
  int64_t a = 0, b = 0;
  const Event* ev = nullptr;
};

// The device whose timeline the steps are partitioned on: among the devices of the training
// thread's rank (Kineto merges ranks as pid = rank << 24 | pid on the host, rank * 256 + device
// on the device), the one with the most busy time. Returns false when no device was busy.
bool primary_device(const Trace& trace, const Track& main, uint32_t* device_pid);

// The class a host call that blocks until the device's queue drains charges the idle stretch it
// leaves behind, or -1 when the call does not block. Device-to-host copies are read-backs
// (`.item()`, `.cpu()`): sync. Pageable or synchronous host-to-device copies wait for the
// staging copy: pcie. cudaFree synchronizes the device: memory. A CPU collective: comm.
int blocking_class(const Trace& trace, const Event& e);

// The class an idle instant is charged to, from the host's innermost span at that instant (null:
// untraced host code): the loader data, the allocator memory, an upload pcie, a read-back or sync
// sync, a CPU collective comm, and CPU ops, launches and annotations host.
int idle_class(const Event* e);

// A GEMM kernel on the SIMT units in fp32 ("volta_sgemm_*", "ampere_sgemm_*", cutlass simt
// sgemm; not a TF32 tensor-core tile), whose work tensor cores (TF32, bf16, fp16) would do.
bool is_simt_fp32_gemm(const std::string& name);

// Whether a device span keeps the device busy (kernels, copies, memsets, collectives).
bool is_busy(const Event& e);

// A host CPU operator flagged kCpuWork (the program's CPU computation, event.h).
bool is_cpu_work(const Event* e);
// An untraced host piece between two CPU-work operators is part of that work (the Python and
// the frees of large CPU tensors between them): pieces[k] with no event, both neighbours
// is_cpu_work.
bool is_cpu_work_gap(const std::vector<HostPiece>& pieces, size_t k);

// Partitions [lo, hi) on the device's timeline: `device` are the device's spans sorted by start,
// `host` the training thread's pieces over [lo, hi) in time order, `host_spans` every host span
// on the training thread overlapping [lo, hi) (for the call stack of a blocking call). Replaces
// p->ns (the parts sum to hi - lo) and adds the details "device.busy.<class>" and
// "device.idle.<class>" (they sum to hi - lo), "device.drained" (idle stretches a blocking call
// began), "sync.by.<stack>" (idle charged to each read-back, by the op stack that issued it) and
// "sync.refill" (the part of that after the call returned) and "host_op.<operator>" (idle
// charged to the host, by the innermost CPU operator running then: `operators` are the training
// thread's innermost operator pieces over [lo, hi); the step's top three), "host.cpu_work" (of
// that, the idle under operators flagged kCpuWork: CPU computation, not dispatch). Rules
// (docs/classification.md §2, "Device-centric attribution"):
// - busy: compute kernels > collectives > host-device copies, by overlap priority;
// - an idle stretch that starts while the host is blocked in a synchronizing call (stream/device/
//   event sync, a device-to-host read-back) is that call's until it returns (sync, or pcie for a
//   pageable upload, memory for cudaFree, comm for a CPU collective); after a sync, the host's
//   refill (CPU ops, launches, untraced code) is sync too, up to the call's own length;
// - any other idle stretch is charged, instant by instant, to the host's innermost span: the
//   loader is data, the allocator memory, a host-to-device copy pcie, a CPU collective comm, a
//   sync call sync, and CPU ops, launches or untraced host code host.
void partition_step(const Trace& trace, const std::vector<const Event*>& device, int64_t lo,
                    int64_t hi, const std::vector<HostPiece>& host,
                    const std::vector<const Event*>& host_spans,
                    const std::vector<HostPiece>& operators, StepPartitionNs* p);

}  // namespace ft::profiler::device_attribution

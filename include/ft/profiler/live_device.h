// live_device.h: joins live CUPTI records to ft's host ranges (threads by id and time; API calls
// inside ft's wait ranges take the wait's class).
#pragma once

#include <cstdint>
#include <vector>

#include "ft/profiler/event.h"

namespace ft::profiler {

// A thread the recorder saw: its OS thread id and its pthread_t.
struct ThreadIds {
  uint32_t os_tid = 0;
  uint64_t pthread = 0;
};

// CUPTI names the thread of an API call by its own id (pthread_t based); ft's host tracks use
// OS thread ids. Host events from CUPTI (API calls, flow starts, NVTX markers: host events with
// a correlation id, or on a kNvtxTid track) are moved onto ft's tracks:
//  1. exactly: a CUPTI thread id equal to the low 32 bits of a recorded thread's pthread_t (or
//     to its OS tid) is that thread;
//  2. by time: the API calls of a CUPTI thread still unknown go to the one recorded thread whose
//     ft ranges (not the step span) enclose at least 90% of at least 3 of its calls.
// Returns the number of CUPTI tracks (API calls, NVTX markers) moved to another thread id.
int map_api_threads(Trace* t, const std::vector<ThreadIds>& threads);

// An API call (host span with a correlation id) whose innermost enclosing ft range on the same
// thread is communication, data or a host-device copy is part of that wait and takes its
// category: the polls and syncs inside a collective are communication, the calls inside ft's
// copy range PCIe, while a sync in ft's own sync range (or outside any wait) stays a sync and a
// kernel launch inside compute stays host/launch time. A memcpy call already linked to its
// device copy keeps the copy's category. Returns the number of calls changed.
int attribute_api_calls(Trace* t);

// Both, in order: what Session::collect does with the device source's events.
void prepare_live_device_events(Trace* t, const std::vector<ThreadIds>& threads);

}  // namespace ft::profiler

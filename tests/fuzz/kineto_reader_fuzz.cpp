// kineto_reader_fuzz.cpp: libFuzzer target for the Kineto reader, HTA analyses and prepare.
#include <cstddef>
#include <cstdint>
#include <string>

#include "ft/core/error.h"
#include "ft/profiler/hta.h"
#include "ft/profiler/kineto_reader.h"
#include "ft/profiler/load_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ft::profiler::KinetoReadOptions opt;
  opt.keep_flows = size % 2 == 1;  // cover both flow paths
  opt.keep_instants = size % 3 == 1;
  opt.buffer_bytes = 64;  // tiny buffer: tokens straddle refills
  try {
    std::vector<ft::profiler::KinetoTrace> ranks;
    ranks.push_back(ft::profiler::read_kineto_records_from_memory(text, "fuzz", opt));
    (void)ft::profiler::hta_analyses(ranks);
    (void)ft::profiler::prepare_kineto_trace(std::move(ranks));
  } catch (const ft::FormatError&) {
    // Malformed input must end here, never in a crash.
  }
  return 0;
}

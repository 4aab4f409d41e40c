// simd_parser.h: the simdjson On-Demand parser a chunk is parsed with (event_chunks.h's
// SimdParser), for the parse functions that read chunks. Internal to profiler/kineto.
#pragma once

#include <simdjson.h>

#include "event_chunks.h"

namespace ft::profiler::kineto {

struct SimdParser {
  simdjson::ondemand::parser parser;
};

}  // namespace ft::profiler::kineto

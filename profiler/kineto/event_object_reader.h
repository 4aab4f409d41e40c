// event_object_reader.h: one trace event object read by the streaming tokenizer into a RawEvent
// (the chunk parser's twin, event_chunk_parser.cpp). Internal to profiler/kineto.
#pragma once

#include <cstdint>
#include <string>

#include "json_stream.h"
#include "kineto_event_fields.h"

namespace ft::profiler::kineto {

class EventObjectReader {
 public:
  // Reads the event object at `cur` into *ev (reset first). ev's strings view this reader's
  // storage until the next call; malformed values fail through the cursor (FormatError).
  void read(JsonCursor* cur, RawEvent* ev);

 private:
  void read_id(IdValue* v, std::string* storage);
  int64_t read_int_or(int64_t fallback, bool* numeric = nullptr);
  double read_double_or(double fallback);
  void read_time(int64_t* ns, bool* has, const char* out_of_range);
  void read_args();

  JsonCursor* cur_ = nullptr;
  RawEvent* ev_ = nullptr;
  std::string key_, arg_key_, scratch_;
  std::string name_, cat_, pid_, tid_, dtype_, arg_name_, direction_;  // ev_'s strings
};

}  // namespace ft::profiler::kineto

// event_chunks.h: the traceEvents array read in parallel: split at event boundaries, each
// chunk's events parsed by simdjson On-Demand on worker threads and handed back in order.
// Internal to profiler/kineto (kineto_reader.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "critical_path_rows.h"
#include "json_stream.h"
#include "kineto_event_fields.h"

namespace ft::profiler::kineto {

// A byte buffer that grows without zero-filling.
struct ByteBuffer {
  std::unique_ptr<char[]> data;
  size_t cap = 0;
  void reserve(size_t n, size_t keep);  // capacity >= n, keeping the first `keep` bytes
};

// A run of whole events of the array. `buf` holds '[' + the chunk's bytes as read (its leading
// comma blanked) + ']' + simdjson's padding; the events' strings view `buf` or `escaped`.
struct EventChunk {
  uint64_t offset = 0;               // document offset of the chunk's first byte (buf[1])
  size_t len = 0;                    // the chunk's bytes: buf[1, 1 + len)
  size_t comma = std::string::npos;  // where the leading comma was blanked (index in buf)
  ByteBuffer buf;
  std::vector<RawEvent> events;
  std::deque<std::string> escaped;  // strings with escapes, decoded
  // What parse_cp_chunk reads instead (critical_path_rows.cpp): HTA's rows, with ev_idx counted
  // from the chunk's first element, and the elements read.
  std::vector<CpRow> rows;
  size_t elements = 0;
  bool done = false, ok = false;
  std::string text() const;  // the chunk's bytes as read
};

// A simdjson On-Demand parser (event_chunk_parser.cpp keeps simdjson's header to itself).
struct SimdParser;
struct SimdParserDeleter {
  void operator()(SimdParser* p) const;
};
using SimdParserPtr = std::unique_ptr<SimdParser, SimdParserDeleter>;
SimdParserPtr make_simd_parser();
// Parses `c`'s events into c->events; false when simdjson or the checks refuse anything.
bool parse_event_chunk(EventChunk* c, SimdParser& parser);
// A chunk's parse, run on the pipeline's threads: parse_event_chunk, or parse_cp_chunk.
using ChunkParse = bool (*)(EventChunk* c, SimdParser& parser);

// Splits the array's bytes at event boundaries (Kineto's layout, else a string-aware scan of
// brackets) into chunks of about `chunk_bytes`, parses them with `parse` on worker threads (a
// lone chunk on the caller's thread) and hands them back in document order. A chunk that the
// parse refuses ends the fast path, and rest() gives the document from that chunk on: the Kineto
// reader's streaming tokenizer reads on from it (and gives the exact error). It is the judge;
// parse_event_chunk accepts only what it accepts and yields the same RawEvents. (HTA's rows,
// parse_cp_chunk, are read from the whole text again instead: load_cp_trace_chunked.)
class EventPipeline {
 public:
  // The bytes after the array's '[': `unread`, then the rest of `src`; `offset` is unread's
  // document offset.
  EventPipeline(std::unique_ptr<ByteSource> src, std::string unread, uint64_t offset,
                size_t chunk_bytes, ChunkParse parse = parse_event_chunk);
  ~EventPipeline();
  EventPipeline(const EventPipeline&) = delete;
  EventPipeline& operator=(const EventPipeline&) = delete;

  // The next chunk in document order, valid until the next call (its outputs may be moved
  // from); nullptr once the fast path ends: at the array's end, at the input's end, or at the
  // first chunk that did not parse (failed() then).
  EventChunk* next();
  bool failed() const { return failed_ != nullptr; }
  // After next() returned nullptr: the document from the first byte no chunk consumed, and the
  // document offset of that byte.
  std::unique_ptr<ByteSource> rest(uint64_t* offset);

 private:
  struct Shared;
  bool split_one();  // reads and scans input until one chunk is cut; false when none is left
  void scan();       // scans pending from scanned_
  void scan_byte(char c, size_t pos);
  void cut();  // pending's first boundary_ bytes become a chunk in the window
  // Kineto's layout (each event opening on a line of its own at one indentation, as PyTorch
  // writes it, or one event a line): learn_layout() reads the indentation off the first event;
  // layout_boundary() is then the end of the last event in pending before a
  // "},\n<indent>{" at or after chunk_bytes_ (0: none), found without scanning the bytes before
  // it. A raw newline is never inside a JSON string, so that '}' ends an event unless it closes
  // an object nested in one whose next line opens another at the events' indentation; a chunk
  // cut there does not parse (its brackets do not close), and the streaming reader reads on from
  // it, as from any chunk refused.
  void learn_layout();
  size_t layout_boundary();
  // A layout without a candidate this far past chunk_bytes_ is not Kineto's: scanned from then.
  static constexpr size_t kLayoutLook = size_t{1} << 20;
  void start_workers();

  std::unique_ptr<ByteSource> src_;
  // Input not yet cut into chunks: pending_.data[1, 1 + pending_len_) (byte 0 is for the
  // chunk's '['); a cut hands the buffer to the chunk and copies the rest to a new one.
  ByteBuffer pending_;
  size_t pending_len_ = 0;
  uint64_t pending_offset_ = 0;
  size_t scanned_ = 0;   // bytes of pending scanned
  size_t boundary_ = 0;  // end of the last whole event in pending (0: none)
  bool in_string_ = false, escape_ = false, array_end_ = false, eof_ = false;
  int64_t depth_ = 0;
  size_t chunk_bytes_;
  bool first_chunk_ = true;
  bool layout_known_ = false, layout_ = false;
  std::string pattern_;                             // "},\n<indent>{"
  size_t brace_floor_ = 0;                          // the '{'s of pending before this were checked
  std::deque<std::unique_ptr<EventChunk>> window_;  // submitted, in document order
  std::unique_ptr<EventChunk> current_;             // the chunk next() returned last
  // Chunks handed back by next(), reused by cut() with their buffers' and events' capacity.
  std::vector<std::unique_ptr<EventChunk>> spare_;
  std::unique_ptr<EventChunk> failed_;              // the chunk that did not parse
  ChunkParse parse_;
  std::unique_ptr<Shared> shared_;
};

}  // namespace ft::profiler::kineto

// kineto_chunks_test.cpp: the chunked simdjson path of the Kineto reader against its streaming
// tokenizer: the same records, metadata and errors on real traces, the fuzz corpus and edge cases,
// with chunks from one event to the whole array.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../profiler/kineto/event_chunks.h"
#include "ft/core/error.h"
#include "ft/profiler/kineto_reader.h"
#include "ft/profiler/kineto_trace.h"
#include "fuzz/fuzz_body.h"

namespace ft::profiler {
namespace {

namespace fs = std::filesystem;

// The fingerprint (fuzz_body.h, which the fuzz target checks the same way), or "error: ...".
std::string read_as(const std::string& text, bool parallel, size_t buffer) {
  KinetoReadOptions opt;
  opt.parallel_events = parallel;
  opt.buffer_bytes = buffer;
  opt.keep_flows = true;
  opt.keep_instants = true;
  return ft::fuzz::kineto_fingerprint(text, opt);
}

// The chunked path at several chunk sizes equals the streaming path.
void expect_same(const std::string& text, const std::string& what) {
  const std::string want = read_as(text, false, 1 << 20);
  for (size_t buffer : {size_t{7}, size_t{64}, size_t{4096}, size_t{1} << 20}) {
    EXPECT_EQ(read_as(text, true, buffer), want) << what << ", chunks of " << buffer << " B";
  }
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

constexpr const char* kTwo =
    R"({"schemaVersion": 1, "traceEvents": [
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 10.5, "dur": 3,
   "args": {"External id": 7, "Input Dims": [[2, 3], [3, 4]], "flag": true, "none": null}},
  {"ph": "X", "cat": "kernel", "name": "gemm\u00e9\ud83d\ude00", "pid": 0, "tid": 7, "ts": 12, "dur": 2.0004,
   "args": {"stream": 7, "device": 0, "correlation": 9, "External id": 7}}
], "traceName": "after"})";

TEST(KinetoChunks, SameRecordsOnEdgeCases) {
  expect_same(kTwo, "two events");
  expect_same(R"({"traceEvents": []})", "empty array");
  expect_same(R"([{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1}])", "bare array");
  expect_same(R"({"traceEvents": [{"ph": "X", "name": "a\"}{]", "ts": 1, "dur": 1, "pid": "p",
    "tid": "t"}, {"ph": "M", "name": "process_name", "pid": "p", "args": {"name": "P\\"}}]})",
              "brackets and escapes in strings, string ids");
  expect_same(R"({"traceEvents": [{"ph": "C", "name": "c", "ts": 1, "pid": 1, "args": {"v": 2.5e3}},
    {"ph": "i", "name": "[memory]", "ts": 2, "pid": 1, "tid": 1,
     "args": {"Bytes": -64, "Total Allocated": 1e3, "Total Reserved": 2048}}]})",
              "counters and memory");
}

// Lone surrogates become U+FFFD on both paths; a pair becomes one code point.
TEST(KinetoChunks, EscapesDecodeAsTheStreamingReaderDecodes) {
  const std::string text =
      R"({"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 1,
       "name": "\ud800x\udc00\ud800\u0041\ud83d\ude00\/\t"}]})";
  const std::string fffd = "\xEF\xBF\xBD";
  for (bool parallel : {true, false}) {
    KinetoReadOptions opt;
    opt.parallel_events = parallel;
    const KinetoTrace t = read_kineto_records_from_memory(text, "t", opt);
    ASSERT_EQ(t.size(), 1u);
    EXPECT_EQ(t.names.at(t.event(0).name),
              fffd + "x" + fffd + fffd + "A" + "\xF0\x9F\x98\x80" + "/\t")
        << (parallel ? "chunked" : "streaming");
  }
}

TEST(KinetoChunks, SameErrorsOnMalformedEvents) {
  const std::vector<std::string> bad = {
      R"({"traceEvents": [{"ph": "X", "ts": 1}, {"ph": "X", "ts": 01}]})",
      R"({"traceEvents": [{"ph": "X", "ts": 1}, {"ph": "X", "ts": 2, "args": {"x": tru}}]})",
      R"({"traceEvents": [{"ph": "X", "ts": 1} {"ph": "X", "ts": 2}]})",
      R"({"traceEvents": [{"ph": "X", "ts": 1},, {"ph": "X", "ts": 2}]})",
      R"({"traceEvents": [{"ph": "X", "ts": 1}, {"ph": "X", "ts": 2, "name": "a\q"}]})",
      R"({"traceEvents": [{"ph": "X", "ts": 1}, {"ph": "X", "ts": 2,}]})",
      R"({"traceEvents": [{"ph": "X", "ts": 1}, 3, {"ph": "X", "ts": 2}]})",
      R"({"traceEvents": [{"ph": "X", "ts": 1}, {"ph": "X", "ts": 1e30}]})",
      R"({"traceEvents": [{"ph": "X", "ts": 1}, {"ph": "X"}]})",
      R"({"traceEvents": [{"ph": "X", "ts": 1}, {"ph": "X", "ts": 2, "name": "\ud800x"}]})",
      R"({"traceEvents": [{"ph": "X", "ts": 1}, {"ph": "X", "ts": 2}])",
      R"({"traceEvents": [{"ph": "X", "ts": 1}, {"ph": "X", "ts": 2})",
      std::string(R"({"traceEvents": [{"ph": "X", "ts": 1}, {"ph": "X", "ts": 2, "name": "a)") +
          '\x01' + "\"}]}",
      std::string(R"({"traceEvents": [{"ph": "X", "ts": 1}, {"ph": "X", "ts": 2, "name": "a)") +
          "\xff\xfe" + "\"}]}",
  };
  for (const std::string& text : bad) {
    SCOPED_TRACE(text);
    expect_same(text, "malformed");
  }
  // Deep nesting past the fast path's depth: the streaming reader decides.
  std::string deep = R"({"traceEvents": [{"ph": "X", "ts": 1, "args": {"a": )";
  for (int i = 0; i < 600; ++i) deep += '[';
  for (int i = 0; i < 600; ++i) deep += ']';
  expect_same(deep + "}}]}", "600 nested arrays");
}

// `n` events in PyTorch's layout (braces on lines of their own at two spaces), from after the
// array's '['; `nested` gives every third event an args list of objects written at the events'
// own indentation, so that "\n  },\n  {" also closes an object inside an event.
std::string kineto_layout(int n, bool nested) {
  std::string t = "\n";
  for (int i = 0; i < n; ++i) {
    t += i ? ",\n  {\n" : "  {\n";
    t += R"(    "ph": "X", "cat": "cpu_op", "name": "op{}\"},\n  {", "pid": 1, "tid": 2,)";
    t += "\n    \"ts\": " + std::to_string(10 * i) + ", \"dur\": 4,\n    \"args\": {\n";
    t += "      \"External id\": " + std::to_string(i);
    if (nested && i % 3 == 1)
      t += ", \"list\": [\n  {\n    \"a\": 1\n  },\n  {\n    \"b\": 2\n  }\n  ]";
    t += "\n    }\n  }";
  }
  return t + "\n]}";
}

// The events' ends found from the layout, not by a scan: every chunk parses.
TEST(KinetoChunks, KinetosLayoutIsCutWithoutRefusals) {
  const std::string body = kineto_layout(400, false);
  for (size_t chunk : {size_t{1}, size_t{300}, size_t{4096}}) {
    kineto::EventPipeline pipe(kineto::memory_byte_source(body), "", 0, chunk);
    size_t events = 0, chunks = 0;
    while (const kineto::EventChunk* c = pipe.next()) {
      events += c->events.size();
      ++chunks;
      ASSERT_FALSE(c->events.empty());
      EXPECT_EQ(c->events.back().name, "op{}\"},\n  {") << "chunks of " << chunk;
    }
    uint64_t offset = 0;
    std::unique_ptr<kineto::ByteSource> rest = pipe.rest(&offset);
    EXPECT_EQ(events, 400u) << "chunks of " << chunk;
    EXPECT_GT(chunks, chunk < 4096 ? 100u : 5u);
    // What is left for the streaming reader: the array's end and the object's.
    char tail[8] = {};
    EXPECT_EQ(rest->read(tail, sizeof(tail)), 3u);
    EXPECT_EQ(std::string(tail), "\n]}");
    EXPECT_EQ(offset, body.size() - 3);
  }
}

TEST(KinetoChunks, SameRecordsInKinetosLayoutWithNestedObjectsAtItsIndentation) {
  for (bool nested : {false, true}) {
    expect_same("{\"traceEvents\": [" + kineto_layout(60, nested), nested ? "nested" : "plain");
  }
}

TEST(KinetoChunks, SameRecordsOnTheRepositorysTracesAndFuzzCorpus) {
  const fs::path data = fs::path(FT_SOURCE_DIR) / "tests" / "data";
  size_t n = 0;
  for (const fs::path& dir : {data / "kineto", data / "fuzz"}) {
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (!e.is_regular_file() || !name.ends_with(".json")) continue;
      expect_same(slurp(e.path()), name);
      ++n;
    }
  }
  EXPECT_GT(n, 10u);
}

// Every real trace in ../shared when present (the suite passes without it).
TEST(KinetoChunks, SameRecordsOnTheSharedGpuTraces) {
  const fs::path root = fs::path(FT_SOURCE_DIR) / ".." / "shared" / "traces" / "hta";
  if (!fs::exists(root)) GTEST_SKIP() << "no " << root;
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || !(name.ends_with(".json") || name.ends_with(".json.gz"))) continue;
    auto read = [&](bool parallel) {
      KinetoReadOptions opt;
      opt.parallel_events = parallel;
      try {
        return ft::fuzz::records_fingerprint(read_kineto_records(e.path().string(), opt));
      } catch (const FormatError& err) {
        return std::string("error: ") + err.what();
      }
    };
    EXPECT_EQ(read(true), read(false)) << e.path();
    ++n;
  }
  EXPECT_GT(n, 0u);
}

}  // namespace
}  // namespace ft::profiler

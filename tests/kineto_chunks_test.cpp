// kineto_chunks_test.cpp: the chunked simdjson path of the Kineto reader against its streaming
// tokenizer: the same records, metadata and errors on real traces, the fuzz corpus and edge cases,
// with chunks from one event to the whole array.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "../profiler/kineto/critical_path_rows.h"
#include "../profiler/kineto/event_chunks.h"
#include "../profiler/kineto/json_stream.h"
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

// The repository's traces and fuzz corpus (*.json).
std::vector<fs::path> corpus_files() {
  const fs::path data = fs::path(FT_SOURCE_DIR) / "tests" / "data";
  std::vector<fs::path> out;
  for (const fs::path& dir : {data / "kineto", data / "fuzz"}) {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().filename().string().ends_with(".json"))
        out.push_back(e.path());
  }
  return out;
}

// Every real trace in ../shared (*.json, *.json.gz); none when it is absent (the suite passes
// without it).
std::vector<fs::path> shared_trace_files() {
  const fs::path root = fs::path(FT_SOURCE_DIR) / ".." / "shared" / "traces" / "hta";
  std::vector<fs::path> out;
  if (!fs::exists(root)) return out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && (name.ends_with(".json") || name.ends_with(".json.gz")))
      out.push_back(e.path());
  }
  return out;
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

// Events a line (as bench/kineto_tile.py writes them), two to a line here: cut only at the
// lines' ends, where "},\n{" is; a bracket scan would cut between every two events.
TEST(KinetoChunks, EventsALineAreCutAtTheLinesEnds) {
  std::string body = "\n";
  for (int i = 0; i < 100; ++i) {
    const std::string ev = R"({"ph": "X", "name": "a}, {", "pid": 1, "tid": 1, "ts": )" +
                           std::to_string(i) + R"(, "dur": 1, "args": {"x": {"y": [1]}}})";
    body += (i ? ",\n" : "") + ev + ", " + ev;
  }
  body += "\n]}";
  kineto::EventPipeline pipe(kineto::memory_byte_source(body), "", 0, 1);
  size_t chunks = 0;
  while (const kineto::EventChunk* c = pipe.next()) {
    EXPECT_EQ(c->events.size(), 2u) << "chunk " << chunks;
    ++chunks;
  }
  EXPECT_EQ(chunks, 100u);
  expect_same("{\"traceEvents\": [" + body, "two events a line");
}

TEST(KinetoChunks, SameRecordsInKinetosLayoutWithNestedObjectsAtItsIndentation) {
  for (bool nested : {false, true}) {
    expect_same("{\"traceEvents\": [" + kineto_layout(60, nested), nested ? "nested" : "plain");
  }
}

TEST(KinetoChunks, SameRecordsOnTheRepositorysTracesAndFuzzCorpus) {
  const std::vector<fs::path> files = corpus_files();
  for (const fs::path& f : files) expect_same(slurp(f), f.filename().string());
  EXPECT_GT(files.size(), 10u);
}

// Every real trace in ../shared when present (the suite passes without it).
TEST(KinetoChunks, SameRecordsOnTheSharedGpuTraces) {
  const std::vector<fs::path> files = shared_trace_files();
  if (files.empty()) GTEST_SKIP() << "no ../shared/traces/hta";
  for (const fs::path& f : files) {
    auto read = [&](bool parallel) {
      KinetoReadOptions opt;
      opt.parallel_events = parallel;
      try {
        return ft::fuzz::records_fingerprint(read_kineto_records(f.string(), opt));
      } catch (const FormatError& err) {
        return std::string("error: ") + err.what();
      }
    };
    EXPECT_EQ(read(true), read(false)) << f;
  }
}

// HTA's rows of a trace (critical_path_rows.h) as fuzz_body.h prints them, or "error: ...".
std::string cp_fingerprint(const std::function<kineto::CpTrace()>& load) {
  try {
    return ft::fuzz::cp_rows_fingerprint(load());
  } catch (const Error& e) {
    return std::string("error: ") + e.what();
  }
}

// A file's rows read in chunks equal those of its whole text, as HTA's loader reads them, with
// and without the alignment and last-step cut; `chunked` (when given) whether the chunked read
// took it.
void expect_same_rows(const fs::path& file, std::optional<bool> chunked = std::nullopt) {
  for (bool align : {true, false}) {
    const std::string whole = cp_fingerprint(
        [&] { return kineto::load_cp_trace(kineto::read_all_text(file.string()), align); });
    EXPECT_EQ(cp_fingerprint([&] { return kineto::load_cp_trace_file(file.string(), align); }),
              whole)
        << file;
    if (chunked) {
      EXPECT_EQ(kineto::load_cp_trace_chunked(kineto::open_byte_source(file.string()), "t", align)
                    .has_value(),
                *chunked)
          << file;
    }
  }
}

class CpRowsChunked : public ::testing::Test {
 protected:
  fs::path write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ft_cp_rows_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CpRowsChunked, SameRowsAsTheWholeText) {
  const std::string head =
      R"({"schemaVersion": 1, "distributedInfo": {"rank": 3}, "traceEvents": [)";
  expect_same_rows(write("layout.json", head + kineto_layout(400, false)), true);
  expect_same_rows(write("nested.json", head + kineto_layout(60, true)), true);
  expect_same_rows(write("two.json", kTwo), true);
  // GPU rows, a sync, counters of a range-profiler kernel, a string pid, a dropped "Trace" row,
  // two steps (the last one cut), a row that is not an object.
  expect_same_rows(write("gpu.json", R"({"traceEvents": [
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.5, "dur": 10},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1.2, "dur": 2, "args": {"correlation": 5}},
  {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 4, "dur": 3.5, "args": {"stream": 7, "correlation": 5}},
  {"ph": "X", "cat": "cuda_profiler_range", "name": "r", "pid": 0, "tid": 7, "ts": 8, "dur": 1, "args": {"stream": 7, "correlation": 6, "smsp__inst": 12.5}},
  {"ph": "X", "cat": "cuda_sync", "name": "Event Sync", "pid": 0, "tid": 7, "ts": 9, "dur": 1, "args": {"wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": 5}},
  {"ph": "X", "cat": "Trace", "name": "t", "pid": "Spans", "tid": 1, "ts": 0, "dur": 99},
  7,
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": "p", "tid": 1, "ts": 11, "dur": 10}
], "traceName": "x"})"),
                   true);
  expect_same_rows(write("empty.json", R"({"traceEvents": []})"), true);
  // simdjson reads a value's type from its first byte: both reads take "tru" for a boolean.
  expect_same_rows(write("tru.json", R"({"traceEvents": [{"cat": "c", "ts": 1, "dur": tru}]})"),
                   true);
}

// What the chunked read leaves to the whole text: the same rows or the same error.
TEST_F(CpRowsChunked, OddDocumentsAreReadWhole) {
  const std::string ev =
      R"({"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1})";
  expect_same_rows(write("bare.json", "[" + ev + "]"), false);
  expect_same_rows(write("twice.json", R"({"traceEvents": [)" + ev + R"(], "traceEvents": [)" + ev +
                                           "," + ev + "]}"),
                   false);
  expect_same_rows(write("none.json", R"({"schemaVersion": 1})"), false);
  expect_same_rows(write("no_comma.json", R"({"traceEvents": [)" + ev + R"( {"ts": 2}]})"), false);
  expect_same_rows(write("ts_string.json",
                         R"({"traceEvents": [)" + ev + R"(, {"cat": "c", "ts": "1", "dur": 1}]})"),
                   false);
  expect_same_rows(write("tail.json", R"({"traceEvents": [)" + ev + R"(]} x)"), false);
  expect_same_rows(write("cut.json", R"({"traceEvents": [)" + ev + ", " + ev), false);
}

TEST_F(CpRowsChunked, SameRowsOnTheRepositorysTracesAndFuzzCorpus) {
  const std::vector<fs::path> files = corpus_files();
  for (const fs::path& f : files) expect_same_rows(f);
  EXPECT_GT(files.size(), 10u);
}

// Every real trace in ../shared when present (the suite passes without it).
TEST(CpRowsChunkedShared, SameRowsOnTheSharedGpuTraces) {
  const std::vector<fs::path> files = shared_trace_files();
  if (files.empty()) GTEST_SKIP() << "no ../shared/traces/hta";
  for (const fs::path& f : files) expect_same_rows(f);
}

}  // namespace
}  // namespace ft::profiler

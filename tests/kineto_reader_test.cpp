// kineto_reader_test.cpp: the Kineto reader on small samples of each schema generation, gzip,
// rank directories, and malformed or truncated input (errors name the byte offset).
#include "ft/profiler/kineto_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/profiler/hta.h"

namespace fs = std::filesystem;
using ft::profiler::Category;
using ft::profiler::Event;
using ft::profiler::KinetoReadOptions;
using ft::profiler::Phase;
using ft::profiler::Trace;

namespace {

std::string data_path(const std::string& name) {
  return std::string(FT_SOURCE_DIR) + "/tests/data/kineto/" + name;
}

const Event& find(const Trace& t, const std::string& name) {
  for (const Event& e : t.events) {
    if (t.names.at(e.name) == name) return e;
  }
  throw std::runtime_error("no event named " + name);
}

size_t count_named(const Trace& t, const std::string& name) {
  size_t n = 0;
  for (const Event& e : t.events) n += t.names.at(e.name) == name;
  return n;
}

// Expects a FormatError whose message names a byte offset; returns the message.
std::string format_error(const std::string& json) {
  try {
    ft::profiler::read_kineto_trace_from_memory(json, "sample");
  } catch (const ft::FormatError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("byte "), std::string::npos) << what;
    return what;
  }
  ADD_FAILURE() << "no FormatError for: " << json.substr(0, 200);
  return "";
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("ft_kineto_test_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// One gzip member holding `text` (zlib's deflate with the gzip wrapper).
std::string gzip_member(const std::string& text) {
  z_stream zs{};
  if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return "";
  std::string out(deflateBound(&zs, text.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return rc == Z_STREAM_END ? out : "";
}

}  // namespace

TEST(KinetoReader, CurrentSchemaMapsEventsOntoTheTraceModel) {
  const Trace t = ft::profiler::read_kineto_trace(data_path("current.json"));
  EXPECT_EQ(t.metadata.at("source_format"), "kineto");
  EXPECT_EQ(t.metadata.at("rank"), "3");
  EXPECT_EQ(t.metadata.at("has_rank"), "1");
  // 14 spans + 2 [memory] instants + 1 Total Reserved counter (unchanged between the two).
  EXPECT_EQ(t.events.size(), 17u);

  const Event& copy = find(t, "Memcpy HtoD (Pageable -> Device)");
  EXPECT_EQ(copy.category, Category::kH2D);
  EXPECT_TRUE(copy.flags & ft::profiler::kPageable);
  EXPECT_EQ(copy.bytes, 92928u);
  EXPECT_TRUE(copy.track.device);
  EXPECT_EQ(copy.track.tid, 7u);
  EXPECT_EQ(copy.id, 14u);
  EXPECT_EQ(copy.ts_ns, 1694039994071305000);
  EXPECT_EQ(copy.dur_ns, 11000);

  const Event& launch = find(t, "cudaMemcpyAsync");
  EXPECT_EQ(launch.category, Category::kHost);
  EXPECT_FALSE(launch.track.device);
  EXPECT_EQ(launch.id, copy.id);

  const Event& nccl =
      find(t, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)");
  EXPECT_EQ(nccl.category, Category::kComm);
  EXPECT_EQ(nccl.bytes, 6637568u * 4u);     // In msg nelems x sizeof(Float)
  EXPECT_EQ(nccl.ts_ns, 4458677009853422);  // the µs decimals are kept exactly
  EXPECT_EQ(nccl.dur_ns, 2636669);
  EXPECT_EQ(nccl.arg, 12945);  // External id
  EXPECT_EQ(nccl.track.tid, 40u);

  const Event& annot = find(t, "## backward ##");
  EXPECT_TRUE(annot.track.device);
  EXPECT_TRUE(annot.flags & ft::profiler::kNoStream);

  EXPECT_EQ(find(t, "Stream Sync").category, Category::kSync);
  EXPECT_EQ(find(t, "Memset (Device)").category, Category::kMemset);
  EXPECT_EQ(find(t, "aten::empty").category, Category::kCompute);
  const Event& step = find(t, "ProfilerStep#5");
  EXPECT_EQ(step.category, Category::kStep);
  EXPECT_EQ(step.step, 5);

  const Event& mem = find(t, "[memory]");
  EXPECT_EQ(mem.phase, Phase::kInstant);
  EXPECT_EQ(mem.category, Category::kAlloc);
  EXPECT_EQ(mem.bytes, 5242880u);
  EXPECT_EQ(mem.arg, 5242880);
  EXPECT_DOUBLE_EQ(mem.value, 5435638784.0);
  const Event& reserved = find(t, "[memory] Total Reserved");
  EXPECT_EQ(reserved.phase, Phase::kCounter);
  EXPECT_DOUBLE_EQ(reserved.value, 12782141440.0);
  EXPECT_EQ(count_named(t, "[memory]"), 2u);
  EXPECT_EQ(t.tracks.at(copy.track), "stream 7");
}

TEST(KinetoReader, FlowsAreKeptOnRequest) {
  KinetoReadOptions opt;
  opt.keep_flows = true;
  const Trace t = ft::profiler::read_kineto_trace(data_path("current.json"), opt);
  size_t starts = 0, ends = 0;
  for (const Event& e : t.events) {
    starts += e.phase == Phase::kFlowStart;
    ends += e.phase == Phase::kFlowEnd;
  }
  EXPECT_EQ(starts, 3u);
  EXPECT_EQ(ends, 3u);
}

TEST(KinetoReader, GzipReadsTheSameEventsAsPlain) {
  const Trace plain = ft::profiler::read_kineto_trace(data_path("current.json"));
  const Trace gz = ft::profiler::read_kineto_trace(data_path("current.json.gz"));
  ASSERT_EQ(plain.events.size(), gz.events.size());
  for (size_t i = 0; i < plain.events.size(); ++i) {
    EXPECT_EQ(plain.names.at(plain.events[i].name), gz.names.at(gz.events[i].name));
    EXPECT_EQ(plain.events[i].ts_ns, gz.events[i].ts_ns);
    EXPECT_EQ(plain.events[i].dur_ns, gz.events[i].dur_ns);
    EXPECT_EQ(plain.events[i].track, gz.events[i].track);
  }
  EXPECT_EQ(plain.metadata.at("json_bytes"), gz.metadata.at("json_bytes"));
}

TEST(KinetoReader, Schema2021) {
  const Trace t = ft::profiler::read_kineto_trace(data_path("kineto_2021.json"));
  EXPECT_EQ(t.metadata.at("source_format"), "kineto-2021");
  EXPECT_EQ(t.metadata.at("has_rank"), "0");
  EXPECT_EQ(ft::profiler::trace_rank(t), 0);
  const Event& kernel = find(t, "volta_sgemm_64x64_nn");
  EXPECT_EQ(kernel.category, Category::kCompute);
  EXPECT_TRUE(kernel.track.device);
  EXPECT_EQ(kernel.track.tid, 7u);
  EXPECT_EQ(kernel.id, 3301u);
  EXPECT_EQ(kernel.arg, 3);   // "external id"
  EXPECT_EQ(kernel.step, 7);  // its launch is inside ProfilerStep#7
  const Event& copy = find(t, "Memcpy DtoH (Device -> Pinned)");
  EXPECT_EQ(copy.category, Category::kD2H);
  EXPECT_TRUE(copy.flags & ft::profiler::kPinned);
  EXPECT_EQ(copy.bytes, 4096u);
  EXPECT_EQ(find(t, "Memset (Device)").category, Category::kMemset);
  const Event& loader = find(t, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__");
  EXPECT_EQ(loader.category, Category::kData);
  EXPECT_EQ(loader.step, 7);
  EXPECT_EQ(find(t, "cudaLaunchKernel").category, Category::kHost);
  EXPECT_EQ(t.events.size(), 9u);  // flows are dropped by default
  EXPECT_EQ(t.processes.at(0), "GPU 0");
}

TEST(KinetoReader, LegacyAutogradArray) {
  const Trace t = ft::profiler::read_kineto_trace(data_path("legacy.json"));
  EXPECT_EQ(t.metadata.at("source_format"), "autograd-legacy");
  EXPECT_EQ(t.events.size(), 11u);
  for (const Event& e : t.events) {
    EXPECT_TRUE(e.flags & ft::profiler::kNoSourceCategory);
    EXPECT_FALSE(e.track.device);
    EXPECT_EQ(t.processes.at(e.track.pid), "CPU functions");
  }
  EXPECT_EQ(count_named(t, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"), 2u);
  const Event& loader = find(t, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__");
  EXPECT_EQ(loader.category, Category::kData);
  EXPECT_EQ(loader.step, 0);
  EXPECT_EQ(find(t, "ProfilerStep#1").category, Category::kStep);
  EXPECT_EQ(find(t, "Optimizer.step#SGD.step").category, Category::kOptimizer);
  EXPECT_EQ(find(t, "train_step_user").step, 0);
  EXPECT_EQ(find(t, "aten::add_").step, 1);
  // 8290.4445 µs: three decimals exact, the fourth rounds half up.
  int64_t dur = 0;
  for (const Event& e : t.events) {
    if (t.names.at(e.name).rfind("enumerate", 0) == 0 && e.step == 1) dur = e.dur_ns;
  }
  EXPECT_EQ(dur, 8290445);
  // HTA drops rows without a category, so its analyses see no events.
  std::vector<ft::profiler::KinetoTrace> ranks;
  ranks.push_back(ft::profiler::read_kineto_records(data_path("legacy.json")));
  const auto hta = ft::profiler::hta_analyses(std::move(ranks));
  EXPECT_EQ(hta["events_after_load_filter"]["0"], 0);
}

TEST(KinetoReader, StringEscapesAndStringIds) {
  const std::string json =
      R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a\"b\\c\u00e9\ud83d\ude00\/", )"
      R"("pid": "host", "tid": "main", "ts": 0.5, "dur": 1e3, "args": {"x": [1, {"y": null}]}}]})";
  const Trace t = ft::profiler::read_kineto_trace_from_memory(json, "sample");
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.names.at(t.events[0].name), "a\"b\\c\xc3\xa9\xf0\x9f\x98\x80/");
  EXPECT_EQ(t.events[0].ts_ns, 500);
  EXPECT_EQ(t.events[0].dur_ns, 1000000);
  EXPECT_EQ(t.processes.at(t.events[0].track.pid), "host");
}

TEST(KinetoReader, MalformedInputNamesTheByteOffset) {
  EXPECT_NE(format_error(R"({"traceEvents": [{"ph": "X", "ts": 1.0.0}]})").find("byte 35"),
            std::string::npos);
  EXPECT_NE(format_error(R"({"traceEvents": [{"ph": "X", "ts": 01}]})").find("byte 35"),
            std::string::npos);
  EXPECT_NE(format_error(R"({"traceEvents": [{"ph" "X"}]})").find("byte 23"), std::string::npos);
  EXPECT_NE(format_error(R"({"traceEvents": [1]})").find("not an object"), std::string::npos);
  EXPECT_NE(format_error("").find("empty input"), std::string::npos);
  EXPECT_NE(format_error(R"({"traceEvents": []} x)").find("trailing"), std::string::npos);
  EXPECT_NE(format_error(R"({"traceEvents": [{"ph": "X", "name": "a)"
                         "\x01"
                         R"("}]})")
                .find("control character"),
            std::string::npos);
  EXPECT_NE(format_error(R"({"other": 1})").find("no traceEvents"), std::string::npos);
  EXPECT_NE(format_error(R"({"traceEvents": [{"ph": "X", "name": "x"}]})").find("without ts"),
            std::string::npos);
  EXPECT_NE(format_error(std::string(100000, '[')).find("byte 1: trace event is not an object"),
            std::string::npos);
  EXPECT_NE(
      format_error(R"({"traceEvents": [{"ph": "X", "args": {"a": )" + std::string(100000, '['))
          .find("nesting"),
      std::string::npos);
  EXPECT_NE(format_error(R"({"traceEvents": [], "a": )" + std::string(100000, '[')).find("nesting"),
            std::string::npos);
  format_error(R"({"traceEvents": [{"ph": "X", "ts": 1, "name": "\uZZZZ"}]})");
  format_error(R"({"traceEvents": [{"ph": "X", "ts": 1, "args": {"a": tru}}]})");
  format_error(R"({"traceEvents": [{"ph": "X", "ts": -}]})");
  EXPECT_NE(format_error(R"({"traceEvents": [{"ph": "X", "ts": 1, "dur": 9e17}]})")
                .find("duration out of range"),
            std::string::npos);
  EXPECT_NE(format_error(R"({"traceEvents": [{"ph": "X", "ts": 9999999999999999}]})")
                .find("timestamp out of range"),
            std::string::npos);
  // A non-integral, huge pid is accepted (as id 0), not cast out of range.
  EXPECT_NO_THROW(ft::profiler::read_kineto_trace_from_memory(
      R"({"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "pid": 1e300, "tid": -1.5}]})", "s"));
}

TEST(KinetoReader, EveryTruncationIsAFormatError) {
  const std::string text = ft::read_file(data_path("current.json"));
  for (size_t cut = 0; cut + 2 < text.size(); cut += 37) {
    const std::string what = format_error(text.substr(0, cut));
    // The offset reported is within the bytes that exist.
    const auto at = what.find("byte ");
    ASSERT_NE(at, std::string::npos);
    EXPECT_LE(std::stoull(what.substr(at + 5)), cut) << what;
  }
}

TEST(KinetoReader, TruncatedOrCorruptGzip) {
  const std::string gz = ft::read_file(data_path("current.json.gz"));
  TempDir dir;
  const fs::path cut = dir.path / "cut.json.gz";
  ft::write_file_atomic(cut, gz.substr(0, gz.size() / 2));
  try {
    ft::profiler::read_kineto_trace(cut.string());
    ADD_FAILURE() << "truncated gzip accepted";
  } catch (const ft::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("byte"), std::string::npos) << e.what();
  }
  std::string bad = gz;
  for (size_t i = 20; i < 60 && i < bad.size(); ++i) bad[i] = static_cast<char>(bad[i] ^ 0x5a);
  const fs::path corrupt = dir.path / "corrupt.json.gz";
  ft::write_file_atomic(corrupt, bad);
  EXPECT_THROW(ft::profiler::read_kineto_trace(corrupt.string()), ft::FormatError);
  EXPECT_THROW(ft::profiler::read_kineto_trace((dir.path / "missing.json").string()), ft::IoError);
}

// Concatenated members read as one stream; a wrong CRC-32 or size in any member's trailer is an
// error, whichever inflater (ISA-L or zlib) the build uses.
TEST(KinetoReader, GzipMembersAndTheirTrailersAreChecked) {
  const std::string text = ft::read_file(data_path("current.json"));
  const size_t half = text.size() / 2;
  const std::string a = gzip_member(text.substr(0, half)), b = gzip_member(text.substr(half));
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  TempDir dir;
  const fs::path two = dir.path / "two.json.gz";
  ft::write_file_atomic(two, a + b);
  const Trace plain = ft::profiler::read_kineto_trace(data_path("current.json"));
  const Trace joined = ft::profiler::read_kineto_trace(two.string());
  ASSERT_EQ(plain.events.size(), joined.events.size());
  for (size_t i = 0; i < plain.events.size(); ++i) {
    EXPECT_EQ(plain.events[i].ts_ns, joined.events[i].ts_ns);
    EXPECT_EQ(plain.events[i].dur_ns, joined.events[i].dur_ns);
  }
  EXPECT_EQ(plain.metadata.at("json_bytes"), joined.metadata.at("json_bytes"));
  // The trailer is CRC-32 then ISIZE, 4 bytes each, little-endian.
  for (const size_t back : {8u, 4u}) {
    for (const bool first : {true, false}) {
      std::string bad = first ? a : b;
      bad[bad.size() - back] = static_cast<char>(bad[bad.size() - back] ^ 0x01);
      const fs::path f = dir.path / "bad.json.gz";
      ft::write_file_atomic(f, first ? bad + b : a + bad);
      EXPECT_THROW(ft::profiler::read_kineto_trace(f.string()), ft::FormatError)
          << "trailer byte -" << back << (first ? " of the first member" : " of the second");
    }
  }
  // A second member cut inside its header.
  const fs::path cut = dir.path / "cut.json.gz";
  ft::write_file_atomic(cut, a + b.substr(0, 5));
  EXPECT_THROW(ft::profiler::read_kineto_trace(cut.string()), ft::FormatError);
}

TEST(KinetoReader, DirectoryOfRanks) {
  TempDir dir;
  const std::string text = ft::read_file(data_path("current.json"));
  auto with_rank = [&](const std::string& r) {
    std::string s = text;
    const auto at = s.find("\"rank\": 3");
    s.replace(at, 9, "\"rank\": " + r);
    return s;
  };
  ft::write_file_atomic(dir.path / "b.json", with_rank("1"));
  ft::write_file_atomic(dir.path / "a.json", with_rank("0"));
  ft::write_file_atomic(dir.path / "c.json", ft::read_file(data_path("kineto_2021.json")));
  ft::write_file_atomic(dir.path / "notes.txt", "not a trace");
  const auto ranks = ft::profiler::read_kineto_ranks(dir.path.string());
  ASSERT_EQ(ranks.size(), 3u);
  EXPECT_EQ(ft::profiler::trace_rank(ranks[0]), 0);
  EXPECT_EQ(ft::profiler::trace_rank(ranks[1]), 1);
  EXPECT_EQ(ft::profiler::trace_rank(ranks[2]), 2);  // no distributedInfo: next free rank
  EXPECT_EQ(ranks[2].metadata.at("source_format"), "kineto-2021");

  const Trace merged = ft::profiler::merge_ranks(ranks);
  EXPECT_EQ(merged.events.size(), ranks[0].events.size() * 2 + ranks[2].events.size());
  size_t memsets = 0;
  std::set<ft::profiler::Track> tracks;
  for (const Event& e : merged.events) {
    if (merged.names.at(e.name) == "Memset (Device)") {
      ++memsets;
      tracks.insert(e.track);
    }
  }
  EXPECT_EQ(memsets, 3u);
  EXPECT_EQ(tracks.size(), 3u);  // one device track per rank

  ft::write_file_atomic(dir.path / "d.json", with_rank("1"));
  EXPECT_THROW(ft::profiler::read_kineto_ranks(dir.path.string()), ft::FormatError);
}

TEST(KinetoReader, HtaEntryKeys) {
  TempDir dir;
  fs::create_directories(dir.path / "trace_diff" / "control");
  ft::write_file_atomic(dir.path / "trace_diff" / "control" / "t.json", "[]");
  EXPECT_EQ(ft::profiler::hta_entry_key((dir.path / "trace_diff" / "control").string(),
                                        dir.path.string()),
            "trace_diff/control");
  EXPECT_EQ(ft::profiler::hta_entry_key((dir.path / "trace_diff" / "control" / "t.json").string()),
            "control");
  // Without a root, the ancestor holding hta_outputs.json is the root.
  ft::write_file_atomic(dir.path / "hta_outputs.json", "{}");
  EXPECT_EQ(ft::profiler::hta_entry_key((dir.path / "trace_diff" / "control").string()),
            "trace_diff/control");
  EXPECT_EQ(ft::profiler::hta_entry_key((dir.path / "trace_diff" / "control" / "t.json").string()),
            "control");
}

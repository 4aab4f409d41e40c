// trace_writer_test.cpp: Chrome trace JSON: golden file, structure, escaping, round trip through
// the reader, reader errors, and a profiled ft-train run producing a valid trace.
#include "ft/profiler/trace_writer.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/profiler/trace_reader.h"
#include "test_scratch.h"

namespace ft::profiler {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path temp_dir(const std::string& name) {
  return ft::test::scratch_dir("ft_trace_test_" + name);
}

Event span(Trace& t, const char* name, Category c, int64_t ts, int64_t dur, Track track,
           int64_t step = -1) {
  Event e;
  e.ts_ns = ts;
  e.dur_ns = dur;
  e.name = t.names.intern(name);
  e.category = c;
  e.track = track;
  e.step = step;
  return e;
}

// A fixed synthetic trace: host spans (step, nested phases), an allocator instant, counters
// (one NaN), a runtime call with a flow to a kernel, a pageable copy, and a hostile name.
Trace synthetic_trace() {
  Trace t;
  t.source = "ft";
  const Track host{4242, 4242, false}, worker{4242, 4250, false}, stream{0, 7, true};
  t.processes[4242] = "ft-train";
  t.processes[0] = "GPU 0";
  t.tracks[host] = "main";
  t.tracks[worker] = "loader worker 0";
  t.tracks[stream] = "stream 7";
  t.metadata["config"] = "{\"layers\":2}";
  t.metadata["device_activity"] = "recording";
  t.dropped_events = 3;
  const int64_t t0 = 1'000'000'000'123;
  t.events.push_back(span(t, "ProfilerStep#1", Category::kStep, t0, 5'000'000, host, 1));
  t.events.back().arg = 1;
  t.events.push_back(span(t, "data.next", Category::kData, t0 + 1'000, 200'000, host, 1));
  t.events.push_back(span(t, "loader.preprocess", Category::kData, t0 + 500, 150'000, worker, 1));
  Event fwd = span(t, "fwd.block", Category::kCompute, t0 + 201'500, 1'000'001, host, 1);
  fwd.arg = 0;
  t.events.push_back(fwd);
  Event oom = span(t, "alloc.slow_path", Category::kAlloc, t0 + 300'000, 0, host, 1);
  oom.phase = Phase::kInstant;
  oom.bytes = 4u << 20;
  oom.flags = kSlowPath;
  t.events.push_back(oom);
  Event launch = span(t, "cudaLaunchKernel", Category::kHost, t0 + 400'000, 5'000, host, 1);
  launch.id = 77;
  t.events.push_back(launch);
  Event fs_ = launch;
  fs_.phase = Phase::kFlowStart;
  fs_.dur_ns = 0;
  fs_.name = t.names.intern("ac2g");
  fs_.category = Category::kOther;
  t.events.push_back(fs_);
  Event kernel = span(t, "gemm<\"x\">\n\t\\ </script><script>alert(1)</script>", Category::kCompute,
                      t0 + 410'000, 90'000, stream, 1);
  kernel.id = 77;
  t.events.push_back(kernel);
  Event fe = kernel;
  fe.phase = Phase::kFlowEnd;
  fe.dur_ns = 0;
  fe.name = fs_.name;
  fe.category = Category::kOther;
  t.events.push_back(fe);
  Event copy =
      span(t, "Memcpy HtoD (Pageable -> Device)", Category::kH2D, t0 + 600'000, 40'000, stream, 1);
  copy.bytes = 65536;
  copy.flags = kPageable | kSynchronous;
  t.events.push_back(copy);
  t.events.push_back(
      span(t, "optimizer", Category::kOptimizer, t0 + 1'300'000, 3'000'000, host, 1));
  Event loss = span(t, "loss", Category::kCounter, t0 + 4'900'000, 0, host, 1);
  loss.phase = Phase::kCounter;
  loss.value = 2.718281828459045;
  t.events.push_back(loss);
  Event nan = loss;
  nan.name = t.names.intern("grad_norm");
  nan.value = std::nan("");
  t.events.push_back(nan);
  return t;
}

TEST(TraceWriter, MatchesGoldenFile) {
  const std::string got = trace_to_json(synthetic_trace());
  const fs::path golden = fs::path(FT_SOURCE_DIR) / "tests/data/golden/trace_small.json";
  if (std::getenv("FT_UPDATE_GOLDEN")) write_file_atomic(golden, got);
  EXPECT_EQ(got, read_file(golden))
      << "regenerate with FT_UPDATE_GOLDEN=1 after a deliberate change";
}

TEST(TraceWriter, StructureIsLoadableChromeTraceFormat) {
  const json j = json::parse(trace_to_json(synthetic_trace()));
  EXPECT_EQ(j.at("displayTimeUnit"), "ms");
  EXPECT_EQ(j.at("ft").at("format"), "ft-trace");
  const json& ev = j.at("traceEvents");
  ASSERT_TRUE(ev.is_array());
  std::set<std::pair<int, int>> named_threads;
  std::map<uint64_t, std::set<std::string>> flows;
  std::set<std::string> cats;
  double last_ts = -1;
  for (const json& e : ev) {
    ASSERT_TRUE(e.at("ph").is_string());
    ASSERT_TRUE(e.at("name").is_string());
    ASSERT_TRUE(e.at("pid").is_number_integer());
    ASSERT_TRUE(e.at("tid").is_number_integer());
    const std::string ph = e["ph"];
    if (ph == "M") {
      if (e["name"] == "thread_name")
        named_threads.insert({e["pid"].get<int>(), e["tid"].get<int>()});
      continue;
    }
    ASSERT_TRUE(e.at("ts").is_number());
    EXPECT_GE(e["ts"].get<double>(), last_ts);  // written in time order
    last_ts = e["ts"];
    EXPECT_TRUE(named_threads.count({e["pid"].get<int>(), e["tid"].get<int>()}))
        << "track without thread_name";
    cats.insert(e.at("cat").get<std::string>());
    if (ph == "X") {
      ASSERT_TRUE(e.at("dur").is_number());
      EXPECT_GE(e["dur"].get<double>(), 0);
      EXPECT_TRUE(e.at("args").contains("ft_cat"));
    } else if (ph == "C") {
      ASSERT_TRUE(e.at("args").contains(e["name"].get<std::string>()));
    } else if (ph == "s" || ph == "f") {
      EXPECT_EQ(e["cat"], "ac2g");
      if (ph == "f") {
        EXPECT_EQ(e.at("bp"), "e");
      }
      flows[e.at("id").get<uint64_t>()].insert(ph);
    } else {
      EXPECT_EQ(ph, "i");
      EXPECT_EQ(e.at("s"), "t");
    }
  }
  EXPECT_EQ(cats, (std::set<std::string>{"user_annotation", "cuda_runtime", "kernel", "gpu_memcpy",
                                         "counter", "ac2g"}));
  ASSERT_EQ(flows.size(), 1u);
  EXPECT_EQ(flows.begin()->second, (std::set<std::string>{"s", "f"}));
}

TEST(TraceWriter, EscapesNamesAndReplacesInvalidUtf8) {
  Trace t;
  std::string nasty = "q\"b\\s/n\nr\rt\tnul";
  nasty.push_back('\0');
  nasty += "\x01\x1f\x7f<&>";
  const std::string utf8 = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
  const std::string bad = std::string("a\xff") + "b\xc3" + "\xe2\x82" + "\xed\xa0\x80";  // invalid
  for (const std::string& n : {nasty, utf8, bad}) {
    Event e;
    e.name = t.names.intern(n);
    e.ts_ns = 1;
    t.events.push_back(e);
  }
  const std::string text = trace_to_json(t);
  EXPECT_EQ(text.find('<'), std::string::npos);  // safe to inline into HTML
  EXPECT_EQ(text.find('\n' + std::string("r")), std::string::npos);
  const json j = json::parse(text);  // throws on invalid UTF-8 or bad escapes
  std::vector<std::string> names;
  for (const json& e : j["traceEvents"]) {
    if (e["ph"] == "X") names.push_back(e["name"]);
  }
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names[0], nasty);
  EXPECT_EQ(names[1], utf8);
  EXPECT_EQ(names[2],
            "a\xef\xbf\xbd"
            "b\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
}

using Key = std::tuple<int64_t, int64_t, std::string, uint32_t, uint32_t, bool, int, int, int64_t,
                       int64_t, uint64_t, int, uint64_t, std::string>;
std::multiset<Key> keys(const Trace& t) {
  std::multiset<Key> out;
  for (const Event& e : t.events) {
    out.insert({e.ts_ns, e.dur_ns, t.names.at(e.name), e.track.pid, e.track.tid, e.track.device,
                static_cast<int>(e.phase), static_cast<int>(e.category), e.step, e.arg, e.bytes,
                e.flags, e.id,
                std::isnan(e.value) ? std::string("nan") : fmt::format("{}", e.value)});
  }
  return out;
}

TEST(TraceReader, RoundTripsFtTracesExactly) {
  const Trace t = synthetic_trace();
  const fs::path d = temp_dir("roundtrip");
  const uint64_t bytes = write_trace_json(t, d / "trace.json");
  EXPECT_EQ(bytes, fs::file_size(d / "trace.json"));
  const Trace back = read_trace_json(d / "trace.json");
  EXPECT_EQ(keys(back), keys(t));
  EXPECT_EQ(back.tracks, t.tracks);
  EXPECT_EQ(back.processes, t.processes);
  EXPECT_EQ(back.metadata, t.metadata);
  EXPECT_EQ(back.dropped_events, t.dropped_events);
  EXPECT_EQ(back.source, "ft");
  // And the reread trace writes the same bytes again.
  EXPECT_EQ(trace_to_json(back), trace_to_json(t));
  fs::remove_all(d);
}

TEST(TraceReader, BadInputGivesClearErrors) {
  auto msg = [](const std::string& text) {
    try {
      parse_trace_json(text, "x.json");
    } catch (const FormatError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("{\"traceEvents\": [").find("x.json: not valid JSON at byte"), std::string::npos);
  EXPECT_NE(msg("{\"events\": []}").find("traceEvents"), std::string::npos);
  EXPECT_NE(msg("{\"traceEvents\": [{\"ph\":\"X\",\"name\":\"a\",\"pid\":1,\"tid\":1,\"dur\":1}]}")
                .find("traceEvents[0]"),
            std::string::npos);
  EXPECT_NE(msg("{\"traceEvents\": [{\"ph\":\"X\",\"ts\":1,\"dur\":-1}]}").find("negative"),
            std::string::npos);
  EXPECT_NE(msg("{\"traceEvents\": [5]}").find("not an object"), std::string::npos);
  EXPECT_NE(
      msg("{\"traceEvents\": [{\"ph\":\"X\",\"ts\":1,\"dur\":1,\"args\":{\"ft_cat\":\"bogus\"}}]}")
          .find("unknown ft_cat"),
      std::string::npos);
  EXPECT_NE(
      msg("{\"ft\":{\"format\":\"ft-trace\",\"version\":9},\"traceEvents\":[]}").find("version 9"),
      std::string::npos);
  EXPECT_THROW(read_trace_json("/nonexistent/trace.json"), IoError);
  // A plain Chrome trace without ft's header still loads, categories guessed from cat.
  const Trace k = parse_trace_json(
      "[{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"pid\":0,\"tid\":7,\"ts\":1.5,\"dur\":2},"
      "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#3\",\"pid\":\"Spans\","
      "\"tid\":1,\"ts\":0,\"dur\":9}]");
  ASSERT_EQ(k.events.size(), 2u);
  EXPECT_EQ(k.events[0].category, Category::kCompute);
  EXPECT_TRUE(k.events[0].track.device);
  EXPECT_EQ(k.events[0].ts_ns, 1500);
  EXPECT_EQ(k.events[1].category, Category::kStep);
}

// Spans on one track must nest: each either ends before the next starts or contains it.
void expect_proper_nesting(const Trace& t) {
  std::map<Track, std::vector<const Event*>> by_track;
  for (const Event& e : t.events) {
    if (e.phase == Phase::kSpan) by_track[e.track].push_back(&e);
  }
  for (auto& [track, spans] : by_track) {
    std::sort(spans.begin(), spans.end(), [](const Event* a, const Event* b) {
      return a->ts_ns != b->ts_ns ? a->ts_ns < b->ts_ns : a->dur_ns > b->dur_ns;
    });
    std::vector<const Event*> open;
    for (const Event* e : spans) {
      while (!open.empty() && open.back()->end_ns() <= e->ts_ns) open.pop_back();
      if (!open.empty()) {
        ASSERT_LE(e->end_ns(), open.back()->end_ns())
            << t.names.at(e->name) << " overlaps " << t.names.at(open.back()->name);
      }
      open.push_back(e);
    }
  }
}

TEST(ProfiledRun, FtTrainWritesAValidTraceOfTheWindow) {
  const fs::path d = temp_dir("ftrain");
  std::string text;
  for (int i = 0; i < 300; ++i) text += "In the beginning God created the heaven and the earth. \n";
  write_file_atomic(d / "c.txt", text);
  const std::string cmd =
      std::string(FT_BINARY_DIR) + "/ft-train --data " + (d / "c.txt").string() +
      " --layers 2 --heads 2 --channels 32 --seq-len 32 --micro-batch 4 --grad-accum 2"
      " --threads 2 --val-batches 1 --steps 5 --quiet --profile-steps 1-3 --trace " +
      (d / "trace.json").string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int st = pclose(p);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
  EXPECT_NE(out.find("trace: "), std::string::npos) << out;
  const Trace t = read_trace_json(d / "trace.json");
  std::vector<std::string> steps;
  std::map<std::string, int> phases;
  std::map<std::string, int> counters;
  for (const Event& e : t.events) {
    const std::string& n = t.names.at(e.name);
    if (e.category == Category::kStep) steps.push_back(n);
    if (e.phase == Phase::kSpan) ++phases[n];
    if (e.phase == Phase::kCounter) ++counters[n];
    if (e.phase == Phase::kSpan && e.category != Category::kStep) {
      EXPECT_GE(e.step, 1);
      EXPECT_LE(e.step, 3);
    }
  }
  std::sort(steps.begin(), steps.end());
  EXPECT_EQ(steps,
            (std::vector<std::string>{"ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"}));
  EXPECT_EQ(phases["data.next"], 3 * 2);  // K = 2 micro-batches per step
  EXPECT_EQ(phases["fwd.block"], 3 * 2 * 2);
  EXPECT_EQ(phases["bwd.block"], 3 * 2 * 2);
  EXPECT_EQ(phases["optimizer"], 3);
  EXPECT_GT(phases["fwd.head"], 0);
  EXPECT_GT(phases["loss"], 0);
  EXPECT_GT(phases["matmul.fwd"], 0);
  EXPECT_EQ(counters["loss"], 3);
  EXPECT_EQ(counters["page_faults.minor"], 3);
  EXPECT_EQ(counters["mem.reserved"], 3);
  EXPECT_EQ(t.metadata.at("profile_steps"), "1-3");
  EXPECT_NE(t.metadata.at("device_activity").find("not"), std::string::npos);  // no GPU here
  // What the classifier needs about the run (profiler::TrainingProfile, shared with ft-diagnose).
  EXPECT_EQ(t.metadata.at("config.steps"), "5");
  EXPECT_TRUE(t.metadata.count("env.cpu_model"));
  EXPECT_TRUE(t.metadata.count("page_fault_ns"));
  // An fp32 run times its GEMMs in bf16 for the precision finding (or says why it could not).
  EXPECT_TRUE(t.metadata.count("run.gemm_bf16_probe"));
  EXPECT_EQ(counters["cpu.system_ns"], 3);
  EXPECT_EQ(counters["mfu"], 3);
  EXPECT_EQ(counters["tokens_per_s"], 3);
  EXPECT_EQ(t.dropped_events, 0u);
  expect_proper_nesting(t);
  // Every phase span lies inside its step's span.
  std::map<int64_t, const Event*> step_span;
  for (const Event& e : t.events) {
    if (e.category == Category::kStep) step_span[e.arg] = &e;
  }
  for (const Event& e : t.events) {
    if (e.phase != Phase::kSpan || e.category == Category::kStep) continue;
    const Event* s = step_span.at(e.step);
    EXPECT_GE(e.ts_ns, s->ts_ns);
    EXPECT_LE(e.end_ns(), s->end_ns());
  }
  fs::remove_all(d);
}

TEST(ProfiledRun, BadProfileStepsIsAConfigError) {
  const std::string cmd =
      std::string(FT_BINARY_DIR) + "/ft-train --steps 1 --profile-steps 5-2 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int st = pclose(p);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << out;
  EXPECT_NE(out.find("--profile-steps '5-2'"), std::string::npos) << out;
}

}  // namespace
}  // namespace ft::profiler

// kineto_records_test.cpp: KinetoTrace's 32-byte records decode every event exactly (including
// values that need the side table), across blocks, and free their blocks on release.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "ft/core/error.h"
#include "ft/profiler/kineto_trace.h"

using ft::profiler::Category;
using ft::profiler::Event;
using ft::profiler::KinetoTrace;
using ft::profiler::Phase;

namespace {

uint64_t bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

void expect_same(const Event& want, const Event& got, size_t i) {
  SCOPED_TRACE(i);
  EXPECT_EQ(got.ts_ns, want.ts_ns);
  EXPECT_EQ(got.dur_ns, want.dur_ns);
  EXPECT_EQ(got.step, -1);  // not stored
  EXPECT_EQ(got.arg, want.arg);
  EXPECT_EQ(got.bytes, want.bytes);
  EXPECT_EQ(bits(got.value), bits(want.value));  // -0.0 and NaN payloads too
  EXPECT_EQ(got.id, want.id);
  EXPECT_EQ(got.track, want.track);
  EXPECT_EQ(got.name, want.name);
  EXPECT_EQ(got.phase, want.phase);
  EXPECT_EQ(got.category, want.category);
  EXPECT_EQ(got.flags, want.flags);
}

Event span(int64_t ts, int64_t dur) {
  Event e;
  e.ts_ns = ts;
  e.dur_ns = dur;
  e.name = 3;
  e.track = {7, 9, false};
  e.category = Category::kCompute;
  return e;
}

}  // namespace

TEST(KinetoRecords, EveryLayoutDecodesExactly) {
  std::vector<Event> in;
  in.push_back(span(1694039994071305000, 11000));  // compact span
  Event e = span(-5, 0);
  e.id = 0xffffffffu;
  e.arg = std::numeric_limits<int32_t>::min();
  e.bytes = 0xffffffffu;
  e.flags = ft::profiler::kPageable | ft::profiler::kNoSourceCategory;
  e.track = {0, 40, true};
  e.category = Category::kH2D;
  in.push_back(e);                          // compact, at every 32-bit limit
  in.push_back(span(1, int64_t{1} << 32));  // duration past 4.29 s: wide
  in.push_back(span(1, -3));                // negative duration: wide
  e = span(2, 5);
  e.id = uint64_t{1} << 32;  // correlation past 2^32: wide
  in.push_back(e);
  e = span(3, 5);
  e.arg = int64_t{1} << 40;  // External id past int32: wide
  in.push_back(e);
  e = span(4, 5);
  e.bytes = uint64_t{6} << 32;  // copy past 4 GiB: wide
  in.push_back(e);
  e = span(5, 5);
  e.value = 2.5;  // a span with a value: wide
  in.push_back(e);
  Event mem;
  mem.ts_ns = 6;
  mem.phase = Phase::kInstant;
  mem.category = Category::kAlloc;
  mem.arg = -5242880;
  mem.bytes = 5242880;
  mem.value = 5435638784.0;
  in.push_back(mem);  // [memory]: bytes = |arg|
  mem.arg = std::numeric_limits<int64_t>::min();
  mem.bytes = uint64_t{1} << 63;
  in.push_back(mem);
  Event counter;
  counter.ts_ns = 7;
  counter.phase = Phase::kCounter;
  counter.category = Category::kCounter;
  counter.value = -0.0;
  in.push_back(counter);  // counter: bytes 0, arg -1
  counter.value = std::numeric_limits<double>::quiet_NaN();
  in.push_back(counter);
  Event flow;
  flow.ts_ns = 8;
  flow.phase = Phase::kFlowStart;
  flow.id = 123456789012345;
  in.push_back(flow);
  KinetoTrace kt;
  for (const Event& x : in) kt.append(x);
  ASSERT_EQ(kt.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) expect_same(in[i], kt.event(i), i);
}

TEST(KinetoRecords, BlocksAreReleasedAsConsumersWalkPast) {
  KinetoTrace kt;
  const size_t n = 2 * KinetoTrace::kBlockRecords + 100;
  std::vector<Event> in;
  for (size_t i = 0; i < n; ++i) {
    Event e = span(static_cast<int64_t>(i) * 1000, static_cast<int64_t>(i % 977));
    e.id = i % 3 == 0 ? i : 0;
    e.track = {static_cast<uint32_t>(i % 5), static_cast<uint32_t>(i % 7), i % 2 == 0};
    if (i % 1000 == 0) e.dur_ns = int64_t{5} << 32;  // some wide events among them
    in.push_back(e);
    kt.append(e);
  }
  EXPECT_EQ(kt.resident_bytes() / (KinetoTrace::kBlockRecords * sizeof(ft::profiler::KinetoRecord)),
            3u);  // records, plus the wide events' side table
  for (size_t i = 0; i < n; i += 997) expect_same(in[i], kt.event(i), i);
  const size_t before = kt.resident_bytes();
  kt.release_until(KinetoTrace::kBlockRecords + 5);  // the first block only
  EXPECT_EQ(kt.released(), KinetoTrace::kBlockRecords);
  EXPECT_EQ(before - kt.resident_bytes(),
            KinetoTrace::kBlockRecords * sizeof(ft::profiler::KinetoRecord));
  for (size_t i = KinetoTrace::kBlockRecords; i < n; i += 991) expect_same(in[i], kt.event(i), i);
  KinetoTrace moved = std::move(kt);
  EXPECT_EQ(kt.size(), 0u);
  expect_same(in[n - 1], moved.event(n - 1), n - 1);
  moved.release_all();
  EXPECT_EQ(moved.resident_bytes(), 0u);
}

TEST(KinetoRecords, TooManyTracksIsAFormatError) {
  KinetoTrace kt;
  Event e;
  for (uint32_t tid = 0; tid < 65536; ++tid) {
    e.track.tid = tid;
    kt.append(e);
  }
  e.track.tid = 65536;
  EXPECT_THROW(kt.append(e), ft::FormatError);
}

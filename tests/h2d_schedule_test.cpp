// h2d_schedule_test.cpp: the batch uploader's slot/event schedule on a fake stream API that
// records the dependency graph and runs copies late and out of order (no GPU needed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../trainer/h2d_internal.h"
#include "ft/core/error.h"
#include "ft/trainer/data.h"
#include "ft/trainer/h2d.h"
#include "ft/trainer/loader.h"
#include "ft/trainer/train_config.h"

namespace ft::trainer {
namespace {

using h2d::Handle;

// Streams are in-order queues; an event captures the last op of its stream when recorded. Ops
// run only when the host synchronises (or the test lets the "device" progress), newest ready op
// first, so a missing dependency lets a copy overtake the compute that still reads its slot.
class FakeApi final : public h2d::StreamApi {
 public:
  struct Op {
    std::string what;
    std::vector<int> deps;
    std::function<void()> run;
    bool done = false;
  };

  ~FakeApi() override {
    for (auto& [p, bytes] : blocks_) std::free(p);
  }

  Handle create_stream(const char* name) override {
    Handle h = next_handle();
    streams_[h] = -1;
    names_[h] = name;
    return h;
  }
  void destroy_stream(Handle) noexcept override {}
  void name_stream(Handle s, const char* name) noexcept override { names_[s] = name; }
  Handle create_event() override {
    Handle h = next_handle();
    events_[h] = -1;
    return h;
  }
  void destroy_event(Handle) noexcept override {}
  void record(Handle e, Handle s) override { events_.at(e) = last(s); }
  void wait(Handle s, Handle e) override {
    std::vector<int> deps;
    if (last(s) >= 0) deps.push_back(last(s));
    if (events_.at(e) >= 0) deps.push_back(events_.at(e));
    push(s, "wait", deps, [] {});
  }
  void copy_h2d(void* dst, const void* src, size_t bytes, Handle s) override {
    ++copies;
    push(s, "copy", {}, [=] { std::memcpy(dst, src, bytes); });
  }
  void sync_event(Handle e) override { run(events_.at(e)); }
  bool query_event(Handle e) override {
    const int op = events_.at(e);
    return op < 0 || ops_[static_cast<size_t>(op)].done;
  }
  void sync_stream(Handle s) override { run(last(s)); }
  void* alloc_device(size_t bytes) override { return alloc(bytes); }
  void free_device(void* p) noexcept override { poison(p); }
  void* alloc_host(size_t bytes, bool pinned) override {
    (pinned ? pinned_allocs : pageable_allocs)++;
    return alloc(bytes);
  }
  // Poisoned, not freed: a copy that runs after its source was released reads garbage.
  void free_host(void* p, bool) noexcept override { poison(p); }
  void set_device(int device) override { device_ = device; }

  // A kernel on `s` that checks, when it runs, that the slot holds `expected`.
  int launch(Handle s, const int32_t* dev, std::vector<int32_t> expected, const void* payload,
             size_t payload_bytes, std::string* failure) {
    return push(s, "compute", {}, [=, exp = std::move(expected)] {
      if (std::memcmp(dev, exp.data(), exp.size() * sizeof(int32_t)) != 0 && failure->empty()) {
        *failure = "compute saw tokens of another batch (slot overwritten or stale)";
      }
      const auto* p = static_cast<const unsigned char*>(payload);
      for (size_t i = 0; payload && i < payload_bytes; i += 997) {
        if (p[i] != h2d_payload_byte(i) && failure->empty()) *failure = "payload corrupted";
      }
    });
  }
  // Lets the device run up to `n` ready ops (newest first).
  void progress(int n) {
    for (int k = 0; k < n; ++k) {
      int pick = -1;
      for (int i = static_cast<int>(ops_.size()) - 1; i >= 0 && pick < 0; --i) {
        if (!ops_[static_cast<size_t>(i)].done && ready(i)) pick = i;
      }
      if (pick < 0) return;
      execute(pick);
    }
  }
  void run_all() {
    for (int i = static_cast<int>(ops_.size()) - 1; i >= 0; --i) run(i);
  }
  // Whether op `a` must finish before op `b` starts (a is an ancestor of b).
  bool before(int a, int b) const {
    std::vector<int> todo = {b};
    std::set<int> seen;
    while (!todo.empty()) {
      const int x = todo.back();
      todo.pop_back();
      for (int d : ops_[static_cast<size_t>(x)].deps) {
        if (d == a) return true;
        if (seen.insert(d).second) todo.push_back(d);
      }
    }
    return false;
  }
  bool done(int op) const { return ops_[static_cast<size_t>(op)].done; }
  int last_op() const { return static_cast<int>(ops_.size()) - 1; }
  // The op index of the most recent copy on any stream.
  int last_copy() const {
    for (int i = last_op(); i >= 0; --i) {
      if (ops_[static_cast<size_t>(i)].what == "copy") return i;
    }
    return -1;
  }
  std::string stream_name(Handle s) const { return names_.count(s) ? names_.at(s) : ""; }

  int copies = 0, pinned_allocs = 0, pageable_allocs = 0;

 private:
  Handle next_handle() { return reinterpret_cast<Handle>(static_cast<uintptr_t>(++handles_)); }
  int last(Handle s) {
    auto it = streams_.find(s);
    if (it == streams_.end()) it = streams_.emplace(s, -1).first;  // e.g. the legacy stream
    return it->second;
  }
  int push(Handle s, std::string what, std::vector<int> deps, std::function<void()> fn) {
    if (last(s) >= 0) deps.push_back(last(s));
    ops_.push_back({std::move(what), std::move(deps), std::move(fn), false});
    const int id = static_cast<int>(ops_.size()) - 1;
    streams_[s] = id;
    return id;
  }
  bool ready(int i) const {
    for (int d : ops_[static_cast<size_t>(i)].deps) {
      if (!ops_[static_cast<size_t>(d)].done) return false;
    }
    return true;
  }
  void execute(int i) {
    Op& op = ops_[static_cast<size_t>(i)];
    op.run();
    op.done = true;
  }
  void run(int i) {
    if (i < 0 || ops_[static_cast<size_t>(i)].done) return;
    for (int d : std::vector<int>(ops_[static_cast<size_t>(i)].deps)) run(d);
    execute(i);
  }
  void* alloc(size_t bytes) {
    void* p = std::malloc(bytes + 1);
    blocks_[p] = bytes;
    return p;
  }
  void poison(void* p) noexcept {
    auto it = blocks_.find(p);
    if (it != blocks_.end()) std::memset(p, 0xAB, it->second);
  }

  uintptr_t handles_ = 0x1000;
  int device_ = -1;
  std::map<Handle, int> streams_;  // last op
  std::map<Handle, int> events_;   // captured op (-1: nothing)
  std::map<Handle, std::string> names_;
  std::vector<Op> ops_;
  std::map<void*, size_t> blocks_;
};

constexpr int kB = 2, kT = 16;

std::shared_ptr<const data::ChunkedDataset> dataset() {
  std::vector<int32_t> tokens(20000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919) % 50000);
  return data::make_token_dataset(data::make_vector_source(std::move(tokens)), kT, 8);
}

struct TrainRun {
  std::vector<int> copy_ops, compute_ops;
  std::string failure;
};

// Uploads `n` batches, launching a checking kernel for each, with random device progress.
TrainRun train(FakeApi& api, std::shared_ptr<FakeApi> owner, H2DMode mode, int slots, int n,
               size_t payload, uint64_t seed) {
  H2DOptions o;
  o.mode = mode;
  o.batch_size = kB;
  o.seq_len = kT;
  o.slots = slots;
  o.payload_bytes = payload;
  Handle compute = api.create_stream("engine");
  auto up = h2d::make_uploader(owner, o, compute);
  EXPECT_EQ(api.stream_name(compute), "ft.compute");
  data::LoaderOptions lo;
  lo.batch_size = kB;
  lo.seq_len = kT;
  lo.workers = 0;       // batches are filled in next(), into recycled staging buffers
  lo.prefetch = slots;  // prefetch + 2 buffers: the uploader holds up to `slots` of them
  lo.staging = up->staging();
  data::PrefetchLoader loader(dataset(), lo);
  std::mt19937_64 rng(seed);
  TrainRun r;
  for (int j = 0; j < n; ++j) {
    data::Batch b;
    EXPECT_TRUE(loader.next(b));
    std::vector<int32_t> expected(b.inputs(), b.inputs() + 2 * kB * kT);
    const DeviceBatch d = up->upload(std::move(b));
    EXPECT_TRUE(b.empty()) << "upload takes the batch";
    EXPECT_EQ(d.slot, j % slots);
    EXPECT_EQ(d.targets, d.inputs + kB * kT);
    EXPECT_EQ(d.payload != nullptr, payload > 0);
    r.copy_ops.push_back(api.last_copy());
    r.compute_ops.push_back(
        api.launch(compute, d.inputs, std::move(expected), d.payload, payload, &r.failure));
    api.progress(static_cast<int>(rng() % 6));
  }
  up->drain();
  api.run_all();
  const H2DStats s = up->stats();
  EXPECT_EQ(s.uploads, n);
  EXPECT_EQ(s.bytes, static_cast<uint64_t>(n) * (o.batch_bytes() + payload));
  return r;
}

TEST(H2DSchedule, PinnedCopiesOverlapComputeAndNeverOverwriteALiveSlot) {
  for (int slots : {2, 3}) {
    for (uint64_t seed : {1u, 2u, 3u, 4u}) {
      auto api = std::make_shared<FakeApi>();
      const TrainRun r = train(*api, api, H2DMode::kPinned, slots, 24, 4096 + 17, seed);
      EXPECT_EQ(r.failure, "") << "slots " << slots << " seed " << seed;
      for (size_t j = 0; j < r.compute_ops.size(); ++j) {
        // Compute j reads what copy j wrote...
        EXPECT_TRUE(api->before(r.copy_ops[j], r.compute_ops[j])) << j;
        // ...and the next copy into its slot waits for it,
        if (j + slots < r.copy_ops.size()) {
          EXPECT_TRUE(api->before(r.compute_ops[j], r.copy_ops[j + slots])) << j;
        }
        // while the copies of the following batches may run alongside it (the overlap).
        for (size_t k = j + 1; k < j + static_cast<size_t>(slots) && k < r.copy_ops.size(); ++k) {
          EXPECT_FALSE(api->before(r.compute_ops[j], r.copy_ops[k])) << j << " -> " << k;
        }
      }
      EXPECT_GT(api->pinned_allocs, 0) << "staging and payload are page-locked";
      EXPECT_EQ(api->pageable_allocs, 0);
    }
  }
}

TEST(H2DSchedule, PinnedReturnsStagingBuffersOnlyAfterTheirCopy) {
  // Without device progress the host must wait for old copies before their buffers are reused:
  // the lazily run copies would otherwise read recycled (or poisoned) staging memory.
  auto api = std::make_shared<FakeApi>();
  H2DOptions o;
  o.batch_size = kB;
  o.seq_len = kT;
  Handle compute = api->create_stream("engine");
  auto up = h2d::make_uploader(api, o, compute);
  data::LoaderOptions lo;
  lo.batch_size = kB;
  lo.seq_len = kT;
  lo.workers = 0;
  lo.prefetch = 1;
  lo.staging = up->staging();
  data::PrefetchLoader loader(dataset(), lo);
  std::string failure;
  std::vector<int> copies;
  for (int j = 0; j < 12; ++j) {
    data::Batch b;
    ASSERT_TRUE(loader.next(b));
    std::vector<int32_t> expected(b.inputs(), b.inputs() + 2 * kB * kT);
    const DeviceBatch d = up->upload(std::move(b));
    copies.push_back(api->last_copy());
    if (j >= 2) {
      EXPECT_TRUE(api->done(copies[j - 2])) << "slot reuse waited for the old copy";
    }
    EXPECT_FALSE(api->done(copies[j])) << "the new copy is only enqueued";
    api->launch(compute, d.inputs, std::move(expected), nullptr, 0, &failure);
  }
  up->drain();
  api->run_all();
  EXPECT_EQ(failure, "");
}

TEST(H2DSchedule, UploadFromHostPointersLetsTheCallerReuseItsMemoryAtOnce) {
  for (H2DMode mode : {H2DMode::kPinned, H2DMode::kPageable}) {
    auto api = std::make_shared<FakeApi>();
    H2DOptions o;
    o.mode = mode;
    o.batch_size = kB;
    o.seq_len = kT;
    o.payload_bytes = 333;
    Handle compute = api->create_stream("engine");
    auto up = h2d::make_uploader(api, o, compute);
    // One host buffer, rewritten for every batch right after upload_from returns.
    std::vector<int32_t> inputs(kB * kT), targets(kB * kT);
    std::string failure;
    std::mt19937_64 rng(5);
    for (int j = 0; j < 16; ++j) {
      for (int i = 0; i < kB * kT; ++i) {
        inputs[i] = j * 1000 + i;
        targets[i] = -(j * 1000 + i);
      }
      std::vector<int32_t> expected(inputs);
      expected.insert(expected.end(), targets.begin(), targets.end());
      const DeviceBatch d = up->upload_from(inputs.data(), targets.data(), j);
      EXPECT_EQ(d.index, j);
      std::fill(inputs.begin(), inputs.end(), -7);  // the caller reuses its memory at once
      std::fill(targets.begin(), targets.end(), -7);
      api->launch(compute, d.inputs, std::move(expected), d.payload, o.payload_bytes, &failure);
      api->progress(static_cast<int>(rng() % 5));
    }
    up->drain();
    api->run_all();
    EXPECT_EQ(failure, "") << h2d_mode_name(mode);
    if (mode == H2DMode::kPinned) {
      EXPECT_EQ(up->stats().pinned_bytes, 2 * o.batch_bytes() + 333) << "one own buffer a slot";
    }
  }
  auto up = h2d::make_uploader(std::make_shared<FakeApi>(), H2DOptions{H2DMode::kPinned, 0, kB, kT},
                               nullptr);
  EXPECT_THROW(up->upload_from(nullptr, nullptr), ConfigError);
}

TEST(H2DSchedule, PageableCopiesSynchronouslyOnTheComputeStream) {
  auto api = std::make_shared<FakeApi>();
  const TrainRun r = train(*api, api, H2DMode::kPageable, 2, 10, 1000, 7);
  EXPECT_EQ(r.failure, "");
  for (size_t j = 1; j < r.copy_ops.size(); ++j) {
    // Serialised: each copy comes after the previous batch's compute (same stream).
    EXPECT_TRUE(api->before(r.compute_ops[j - 1], r.copy_ops[j]));
  }
  EXPECT_EQ(api->pinned_allocs, 0) << "pageable mode uses plain host memory";
  EXPECT_GT(api->pageable_allocs, 0);
}

TEST(H2DSchedule, PageableUploadReturnsWithTheDataOnTheDevice) {
  auto api = std::make_shared<FakeApi>();
  H2DOptions o;
  o.mode = H2DMode::kPageable;
  o.batch_size = kB;
  o.seq_len = kT;
  auto up = h2d::make_uploader(api, o, nullptr);  // the legacy default stream
  data::LoaderOptions lo;
  lo.batch_size = kB;
  lo.seq_len = kT;
  lo.workers = 0;
  lo.staging = up->staging();
  data::PrefetchLoader loader(dataset(), lo);
  data::Batch b;
  ASSERT_TRUE(loader.next(b));
  std::vector<int32_t> host(b.inputs(), b.inputs() + 2 * kB * kT);
  const DeviceBatch d = up->upload(std::move(b));
  EXPECT_TRUE(api->done(api->last_copy()));
  EXPECT_EQ(std::memcmp(d.inputs, host.data(), host.size() * sizeof(int32_t)), 0);
}

TEST(H2DSchedule, BadInputIsAClearError) {
  auto api = std::make_shared<FakeApi>();
  H2DOptions o;
  o.batch_size = kB;
  o.seq_len = kT;
  o.slots = 1;
  EXPECT_THROW(h2d::make_uploader(api, o, nullptr), ConfigError);  // pinned needs 2 slots
  o.slots = 2;
  o.seq_len = 0;
  EXPECT_THROW(h2d::make_uploader(api, o, nullptr), ConfigError);
  o.seq_len = kT;
  auto up = h2d::make_uploader(api, o, nullptr);
  EXPECT_THROW(up->upload(data::Batch()), ConfigError);
  // A batch of another shape (the loader was configured with T=8).
  data::LoaderOptions lo;
  lo.batch_size = kB;
  lo.seq_len = 8;
  lo.workers = 0;
  data::PrefetchLoader loader(
      data::make_token_dataset(data::make_vector_source(std::vector<int32_t>(4000, 1)), 8, 8), lo);
  data::Batch b;
  ASSERT_TRUE(loader.next(b));
  try {
    up->upload(std::move(b));
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("B=2 T=16"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_h2d_mode("pinned"), H2DMode::kPinned);
  EXPECT_EQ(parse_h2d_mode("pageable"), H2DMode::kPageable);
  EXPECT_STREQ(h2d_mode_name(H2DMode::kPageable), "pageable");
  EXPECT_THROW(parse_h2d_mode("async"), ConfigError);
}

TEST(H2DSchedule, FtTrainFlagsBecomeUploaderOptions) {
  const char* argv[] = {"ft-train", "--micro-batch",    "3", "--seq-len", "32", "--h2d",
                        "pageable", "--h2d-payload-mb", "5"};
  const auto c = parse_train_args(9, argv);
  ASSERT_TRUE(c.has_value());
  const H2DOptions o = h2d_options(*c, 1);
  EXPECT_EQ(o.mode, H2DMode::kPageable);
  EXPECT_EQ(o.device, 1);
  EXPECT_EQ(o.batch_bytes(), 2u * 3 * 32 * 4);
  EXPECT_EQ(o.payload_bytes, size_t{5} << 20);
  EXPECT_EQ(c->to_json().at("h2d"), "pageable");
  const auto d = parse_train_args(1, argv);
  EXPECT_EQ(d->h2d, "pinned") << "pinned is the default";
  const char* bad[] = {"ft-train", "--h2d", "zero-copy"};
  try {
    parse_train_args(3, bad);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("zero-copy"), std::string::npos) << e.what();
  }
  const char* neg[] = {"ft-train", "--h2d-payload-mb", "-1"};
  EXPECT_THROW(parse_train_args(3, neg), ConfigError);
}

TEST(H2DSchedule, WithoutADeviceTheCudaUploaderSaysWhy) {
  H2DOptions o;
  o.batch_size = kB;
  o.seq_len = kT;
  try {
    make_batch_uploader(o, nullptr);
    GTEST_SKIP() << "a CUDA device is present: covered by tests/gpu/h2d_gpu_test";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(msg.find("no CUDA device") != std::string::npos ||
                msg.find("without FT_WITH_CUDA") != std::string::npos)
        << msg;
  }
}

}  // namespace
}  // namespace ft::trainer

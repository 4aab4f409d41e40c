// recorder.cpp: per-thread ring buffers, the monotonic clock, the step window and collect().
#include "ft/profiler/recorder.h"

#include <fmt/format.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "ft/core/error.h"

namespace ft::profiler {

int64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

StepWindow parse_step_window(std::string_view text) {
  auto bad = [&]() {
    return ConfigError(fmt::format(
        "--profile-steps '{}': expected A-B (first and last step, 0-based, A <= B) or A", text));
  };
  auto parse_int = [&](std::string_view s) {
    int64_t v = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size() || v < 0) throw bad();
    return v;
  };
  StepWindow w;
  const size_t dash = text.find('-');
  if (dash == std::string_view::npos) {
    w.first = w.last = parse_int(text);
  } else {
    w.first = parse_int(text.substr(0, dash));
    w.last = parse_int(text.substr(dash + 1));
  }
  if (w.last < w.first) throw bad();
  return w;
}

// One recorded event as the hot path writes it: the name stays a pointer until collect().
struct Recorder::Slot {
  const char* name = nullptr;
  int64_t ts_ns = 0;
  int64_t dur_ns = 0;
  int64_t step = -1;
  int64_t arg = -1;
  uint64_t bytes = 0;
  double value = 0;
  Phase phase = Phase::kSpan;
  Category category = Category::kOther;
  uint8_t flags = 0;
};

struct Recorder::ThreadBuffer {
  struct Open {
    const char* name;
    int64_t ts_ns;
    int64_t step;
    int64_t arg;
    uint64_t bytes;
    Category category;
    uint8_t flags;
    bool keep;
  };
  uint32_t tid = 0;
  uint64_t pthread = 0;  // pthread_self() of the owner
  std::string name;
  std::vector<Slot> ring;             // fixed capacity; slot = head % capacity
  std::atomic<uint64_t> head{0};      // events ever written by the owner
  std::atomic<bool> writing{false};   // owner is inside append()
  std::vector<Open> stack;            // owner only
  std::atomic<uint64_t> overflow{0};  // begins dropped because the stack was full
};

namespace {
std::atomic<uint64_t> g_next_recorder_id{1};
struct TlsCache {
  uint64_t recorder_id = 0;
  void* buffer = nullptr;
};
thread_local TlsCache t_cache;

uint32_t current_tid() { return static_cast<uint32_t>(syscall(SYS_gettid)); }

std::string process_name() {
  char buf[64] = {};
  FILE* f = std::fopen("/proc/self/comm", "r");
  if (f) {
    if (std::fgets(buf, sizeof(buf), f) == nullptr) buf[0] = 0;
    std::fclose(f);
  }
  std::string s(buf);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s.empty() ? std::string("ft") : s;
}
}  // namespace

Recorder::Recorder(RecorderOptions options)
    : options_(options), id_(g_next_recorder_id.fetch_add(1)) {
  if (options_.events_per_thread == 0) options_.events_per_thread = 1;
  if (options_.window.whole_run() == false && options_.window.last < options_.window.first) {
    throw ConfigError("profile step window: last step before first");
  }
}

Recorder::~Recorder() = default;

void Recorder::start() {
  started_.store(true, std::memory_order_seq_cst);
  refresh_active();
}

void Recorder::stop() {
  started_.store(false, std::memory_order_seq_cst);
  refresh_active();
}

void Recorder::set_step(int64_t step) {
  step_.store(step, std::memory_order_relaxed);
  refresh_active();
}

void Recorder::refresh_active() {
  active_.store(started_.load() && options_.window.contains(step_.load()),
                std::memory_order_relaxed);
}

Recorder::ThreadBuffer* Recorder::buffer() noexcept {
  if (t_cache.recorder_id == id_) return static_cast<ThreadBuffer*>(t_cache.buffer);
  return register_thread();
}

Recorder::ThreadBuffer* Recorder::register_thread() noexcept {
  try {
    const uint32_t tid = current_tid();
    std::lock_guard<std::mutex> lock(mu_);
    ThreadBuffer* found = nullptr;
    for (auto& b : buffers_) {
      if (b->tid == tid) found = b.get();  // a thread that switched recorders, or a reused tid
    }
    if (found == nullptr) {
      auto b = std::make_unique<ThreadBuffer>();
      b->tid = tid;
      b->ring.resize(options_.events_per_thread);
      b->stack.reserve(options_.max_depth);
      char name[32] = {};
      if (tid == static_cast<uint32_t>(getpid())) {
        b->name = "main";
      } else if (pthread_getname_np(pthread_self(), name, sizeof(name)) == 0 && name[0] &&
                 process_name() != name) {  // a name of its own, not the inherited one
        b->name = name;
      } else {
        b->name = fmt::format("thread {}", tid);
      }
      found = b.get();
      buffers_.push_back(std::move(b));
    }
    found->pthread = static_cast<uint64_t>(pthread_self());  // also for a reused tid
    t_cache.recorder_id = id_;
    t_cache.buffer = found;
    return found;
  } catch (...) {
    // Out of memory for a ring: this thread's events are lost, and counted.
    lost_registrations_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
}

void Recorder::append(ThreadBuffer* b, const Slot& s) noexcept {
  // Dekker-style handshake with collect(): either collect() sees `writing` and waits, or
  // this thread sees started_ == false and writes nothing.
  b->writing.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (started_.load(std::memory_order_relaxed)) {
    const uint64_t h = b->head.load(std::memory_order_relaxed);
    b->ring[h % b->ring.size()] = s;
    b->head.store(h + 1, std::memory_order_release);
  }
  b->writing.store(false, std::memory_order_release);
}

void Recorder::begin(const char* name, Category cat, int64_t arg, uint64_t bytes,
                     uint8_t flags) noexcept {
  if (!started()) return;
  ThreadBuffer* b = buffer();
  if (b == nullptr) return;
  if (b->stack.size() >= options_.max_depth) {
    b->overflow.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  b->stack.push_back({name, now_ns(), step(), arg, bytes, cat, flags, active()});
}

bool Recorder::end(const char* name) noexcept {
  if (t_cache.recorder_id != id_) return false;  // this thread never began a range here
  auto* b = static_cast<ThreadBuffer*>(t_cache.buffer);
  if (b == nullptr || b->stack.empty()) return false;
  const int64_t t = now_ns();
  size_t i = b->stack.size();
  while (i-- > 0) {
    const char* n = b->stack[i].name;
    if (n == name || (n && name && std::strcmp(n, name) == 0)) break;
  }
  if (i == static_cast<size_t>(-1)) return false;
  const ThreadBuffer::Open o = b->stack[i];
  b->stack.resize(i);  // ranges opened inside and never closed are discarded
  if (!o.keep) return true;
  Slot s;
  s.name = o.name;
  s.ts_ns = o.ts_ns;
  s.dur_ns = t - o.ts_ns;
  s.step = o.step;
  s.arg = o.arg;
  s.bytes = o.bytes;
  s.category = o.category;
  s.flags = o.flags;
  append(b, s);
  return true;
}

void Recorder::instant(const char* name, Category cat, int64_t arg, uint64_t bytes,
                       uint8_t flags) noexcept {
  if (!active()) return;
  ThreadBuffer* b = buffer();
  if (b == nullptr) return;
  Slot s;
  s.name = name;
  s.ts_ns = now_ns();
  s.step = step();
  s.arg = arg;
  s.bytes = bytes;
  s.phase = Phase::kInstant;
  s.category = cat;
  s.flags = flags;
  append(b, s);
}

void Recorder::counter(const char* name, double value) noexcept {
  if (!active()) return;
  ThreadBuffer* b = buffer();
  if (b == nullptr) return;
  Slot s;
  s.name = name;
  s.ts_ns = now_ns();
  s.step = step();
  s.value = value;
  s.phase = Phase::kCounter;
  s.category = Category::kCounter;
  append(b, s);
}

void Recorder::complete(const char* name, Category cat, int64_t ts_ns, int64_t dur_ns, int64_t arg,
                        uint64_t bytes, uint8_t flags) noexcept {
  if (!active()) return;
  ThreadBuffer* b = buffer();
  if (b == nullptr) return;
  Slot s;
  s.name = name;
  s.ts_ns = ts_ns;
  s.dur_ns = dur_ns;
  s.step = step();
  s.arg = arg;
  s.bytes = bytes;
  s.category = cat;
  s.flags = flags;
  append(b, s);
}

const char* Recorder::intern(std::string_view s) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = name_index_.find(s);
  if (it != name_index_.end()) return it->second;
  names_.push_back(std::make_unique<std::string>(s));
  const std::string& stored = *names_.back();
  name_index_.emplace(std::string_view(stored), stored.c_str());
  return stored.c_str();
}

void Recorder::set_thread_name(std::string_view name) {
  ThreadBuffer* b = buffer();
  if (b == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  b->name = std::string(name);
}

std::vector<ThreadIds> Recorder::threads() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ThreadIds> out;
  for (const auto& b : buffers_) out.push_back({b->tid, b->pthread});
  return out;
}

Trace Recorder::collect() {
  stop();
  Trace t;
  t.source = "ft";
  const uint32_t pid = static_cast<uint32_t>(getpid());
  t.processes[pid] = process_name();
  t.metadata["clock"] = "CLOCK_MONOTONIC";
  t.metadata["profile_steps"] =
      options_.window.whole_run()
          ? std::string("all")
          : fmt::format("{}-{}", options_.window.first, options_.window.last);
  t.metadata["events_per_thread"] = std::to_string(options_.events_per_thread);
  std::unordered_map<const char*, uint32_t> by_ptr;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& bp : buffers_) {
    ThreadBuffer& b = *bp;
    while (b.writing.load(std::memory_order_acquire)) std::this_thread::yield();
    const uint64_t head = b.head.load(std::memory_order_acquire);
    const uint64_t cap = b.ring.size();
    const uint64_t first = head > cap ? head - cap : 0;
    t.dropped_events += first + b.overflow.load(std::memory_order_relaxed);
    const Track track{pid, b.tid, false};
    t.tracks[track] = b.name;
    t.events.reserve(t.events.size() + (head - first));
    for (uint64_t i = first; i < head; ++i) {
      const Slot& s = b.ring[i % cap];
      auto it = by_ptr.find(s.name);
      if (it == by_ptr.end()) {
        it = by_ptr.emplace(s.name, t.names.intern(s.name ? s.name : "")).first;
      }
      Event e;
      e.ts_ns = s.ts_ns;
      e.dur_ns = s.dur_ns;
      e.step = s.step;
      e.arg = s.arg;
      e.bytes = s.bytes;
      e.value = s.value;
      e.track = track;
      e.name = it->second;
      e.phase = s.phase;
      e.category = s.category;
      e.flags = s.flags;
      t.events.push_back(e);
    }
  }
  t.dropped_events += lost_registrations_.load(std::memory_order_relaxed);
  return t;
}

}  // namespace ft::profiler

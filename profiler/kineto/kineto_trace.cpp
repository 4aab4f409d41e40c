// kineto_trace.cpp: 32-byte event records in mmap'd blocks, Event decoding, steps, to_trace.
#include "ft/profiler/kineto_trace.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "ft/core/error.h"
#include "kineto_names.h"
#include "kineto_steps.h"

namespace ft::profiler {
namespace {

constexpr size_t kBlockBytes = KinetoTrace::kBlockRecords * sizeof(KinetoRecord);
constexpr uint32_t kMaxName = (uint32_t{1} << 30) - 1;

uint64_t bits_of(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

KinetoRecord* map_block() {
  void* p =
      ::mmap(nullptr, kBlockBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return static_cast<KinetoRecord*>(p);
}

void unmap_block(KinetoRecord* b) {
  if (b) ::munmap(b, kBlockBytes);
}

}  // namespace

KinetoTrace::KinetoTrace(KinetoTrace&& o) noexcept { *this = std::move(o); }

KinetoTrace& KinetoTrace::operator=(KinetoTrace&& o) noexcept {
  if (this == &o) return *this;
  free_blocks();
  names = std::move(o.names);
  tracks = std::move(o.tracks);
  processes = std::move(o.processes);
  source = std::move(o.source);
  metadata = std::move(o.metadata);
  blocks_ = std::move(o.blocks_);
  size_ = o.size_;
  released_blocks_ = o.released_blocks_;
  wide_ = std::move(o.wide_);
  track_keys_ = std::move(o.track_keys_);
  track_index_ = std::move(o.track_index_);
  last_track_ = o.last_track_;
  o.blocks_.clear();
  o.size_ = 0;
  o.released_blocks_ = 0;
  o.last_track_ = 0;
  return *this;
}

KinetoTrace::~KinetoTrace() { free_blocks(); }

void KinetoTrace::free_blocks() {
  for (KinetoRecord*& b : blocks_) {
    unmap_block(b);
    b = nullptr;
  }
  blocks_.clear();
}

uint16_t KinetoTrace::track_index(const Track& t) {
  if (!track_keys_.empty() && track_keys_[last_track_] == t) return last_track_;
  const auto it = track_index_.find(t);
  if (it != track_index_.end()) return last_track_ = it->second;
  if (track_keys_.size() > 0xffff) {
    throw FormatError("Kineto trace has more than 65536 distinct threads and streams");
  }
  const auto id = static_cast<uint16_t>(track_keys_.size());
  track_keys_.push_back(t);
  track_index_.emplace(t, id);
  return last_track_ = id;
}

void KinetoTrace::append(const Event& e) {
  if (e.name > kMaxName) throw FormatError("Kineto trace has more than 2^30 distinct names");
  if ((size_ >> kBlockShift) == blocks_.size()) blocks_.push_back(map_block());
  KinetoRecord& r = blocks_[size_ >> kBlockShift][size_ & kBlockMask];
  r.ts_ns = e.ts_ns;
  r.track = track_index(e.track);
  r.kind = static_cast<uint8_t>((static_cast<uint8_t>(e.phase) << 4) |
                                (static_cast<uint8_t>(e.category) & 15));
  r.flags = e.flags;
  uint32_t layout = kWideLayout;
  const bool plain_value = bits_of(e.value) == 0;
  if (plain_value && e.dur_ns >= 0 && e.dur_ns <= UINT32_MAX && e.id <= UINT32_MAX &&
      e.arg >= INT32_MIN && e.arg <= INT32_MAX && e.bytes <= UINT32_MAX) {
    layout = kSpanLayout;
    r.w[0] = static_cast<uint32_t>(e.dur_ns);
    r.w[1] = static_cast<uint32_t>(e.id);
    r.w[2] = static_cast<uint32_t>(static_cast<int32_t>(e.arg));
    r.w[3] = static_cast<uint32_t>(e.bytes);
  } else if (e.dur_ns == 0 && e.id == 0 && (e.bytes == 0 || e.bytes == magnitude(e.arg))) {
    layout = e.bytes == 0 ? kSampleLayout : kSampleAbsLayout;
    const uint64_t v = bits_of(e.value);
    const auto a = static_cast<uint64_t>(e.arg);
    r.w[0] = static_cast<uint32_t>(v);
    r.w[1] = static_cast<uint32_t>(v >> 32);
    r.w[2] = static_cast<uint32_t>(a);
    r.w[3] = static_cast<uint32_t>(a >> 32);
  } else {
    if (wide_.size() >= UINT32_MAX) throw FormatError("Kineto trace: too many wide events");
    r.w[0] = static_cast<uint32_t>(wide_.size());
    Event w = e;
    w.step = -1;
    wide_.push_back(w);
  }
  r.name_layout = (e.name << 2) | layout;
  ++size_;
}

void KinetoTrace::release_until(size_t i) {
  i = std::min(i, size_);
  while (released_blocks_ < blocks_.size()) {
    const size_t end = std::min((released_blocks_ + 1) << kBlockShift, size_);
    if (end > i) break;
    unmap_block(blocks_[released_blocks_]);
    blocks_[released_blocks_++] = nullptr;
  }
  if (i == size_) {
    wide_.clear();
    wide_.shrink_to_fit();
  }
}

void KinetoTrace::release_block(size_t b) {
  if (b >= blocks_.size()) return;
  unmap_block(blocks_[b]);
  blocks_[b] = nullptr;
}

size_t KinetoTrace::resident_bytes() const {
  size_t held = 0;
  for (const KinetoRecord* b : blocks_) held += b != nullptr;
  return held * kBlockBytes + wide_.capacity() * sizeof(Event);
}

namespace kineto {

StepIndex::StepIndex(const KinetoTrace& t) {
  name_step_.resize(t.names.size());
  for (size_t n = 0; n < name_step_.size(); ++n)
    name_step_[n] = kineto::profiler_step_number(t.names.at(static_cast<uint32_t>(n)));
  for (size_t i = 0; i < t.size(); ++i) {
    const KinetoRecord& r = t.record(i);
    if (static_cast<Category>(r.kind & 15) != Category::kStep) continue;
    const Event e = t.event(i);
    if (!e.track.device && e.phase == Phase::kSpan)
      steps_.push_back({e.ts_ns, e.end_ns(), own_step(e)});
  }
  if (steps_.empty()) return;
  std::sort(steps_.begin(), steps_.end(),
            [](const Step& a, const Step& b) { return a.start < b.start; });
  // Host events carrying a correlation id inside a step, sized exactly and sorted in place by
  // (id, file position): the first host event (file order) carrying an id gives its step.
  if (t.size() > UINT32_MAX) throw FormatError("Kineto trace: more than 2^32 events");
  std::vector<Link>& links = links_;
  for (int pass = 0; pass < 2; ++pass) {
    size_t n = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      const Event e = t.event(i);
      if (e.track.device || e.id == 0 || own_step(e) >= 0) continue;
      const size_t s = find_index(e.ts_ns);
      if (s == steps_.size() || steps_[s].n < 0) continue;
      if (pass == 0) {
        ++n;
      } else {
        links.push_back({e.id, static_cast<uint32_t>(i), static_cast<uint32_t>(s)});
      }
    }
    if (pass == 0) links.reserve(n);
  }
  std::sort(links.begin(), links.end(), [](const Link& a, const Link& b) {
    return a.id != b.id ? a.id < b.id : a.pos < b.pos;
  });
  links.erase(std::unique(links.begin(), links.end(),
                          [](const Link& a, const Link& b) { return a.id == b.id; }),
              links.end());
}

int64_t StepIndex::own_step(const Event& e) const {
  if (e.category != Category::kStep || e.name >= name_step_.size()) return -1;
  return name_step_[e.name];
}

size_t StepIndex::find_index(int64_t ts) const {
  auto it = std::upper_bound(steps_.begin(), steps_.end(), ts,
                             [](int64_t v, const Step& s) { return v < s.start; });
  if (it == steps_.begin()) return steps_.size();
  --it;
  return ts < it->end ? static_cast<size_t>(it - steps_.begin()) : steps_.size();
}

int64_t StepIndex::find(int64_t ts) const {
  const size_t i = find_index(ts);
  return i == steps_.size() ? -1 : steps_[i].n;
}

int64_t StepIndex::step_of(const Event& e) const {
  const int64_t own = own_step(e);
  if (own >= 0 || steps_.empty()) return own;
  if (!e.track.device) return find(e.ts_ns);
  if (e.id == 0) return -1;
  const auto it = std::lower_bound(links_.begin(), links_.end(), e.id,
                                   [](const Link& l, uint64_t id) { return l.id < id; });
  return it != links_.end() && it->id == e.id ? steps_[it->step].n : -1;
}

}  // namespace kineto

Trace to_trace(KinetoTrace&& kt, bool assign_steps) {
  Trace t;
  {
    const kineto::StepIndex steps(kt);
    t.events.reserve(kt.size());
    for (size_t i = 0; i < kt.size(); ++i) {
      Event e = kt.event(i);
      e.step = assign_steps ? steps.step_of(e) : steps.own_step(e);
      t.events.push_back(e);
      if (((i + 1) & KinetoTrace::kBlockMask) == 0) kt.release_until(i + 1);
    }
  }
  kt.release_all();
  t.names = std::move(kt.names);
  t.tracks = std::move(kt.tracks);
  t.processes = std::move(kt.processes);
  t.source = std::move(kt.source);
  t.metadata = std::move(kt.metadata);
  return t;
}

}  // namespace ft::profiler

// event_object_reader.cpp: the streaming tokenizer's event object reader (event_object_reader.h).
#include "event_object_reader.h"

#include <charconv>

namespace ft::profiler::kineto {
namespace {

// |ts|, |dur| below 2^62 ns (~146 years) so that ts + dur never overflows.
constexpr int64_t kMaxNs = int64_t{1} << 62;

}  // namespace

void EventObjectReader::read_id(IdValue* v, std::string* storage) {
  v->present = true;
  const JsonType t = cur_->peek();
  if (t == JsonType::kString) {
    v->is_string = true;
    cur_->read_string(storage);
    v->str = *storage;
  } else if (t == JsonType::kNumber) {
    const JsonNumber n = cur_->read_number();
    v->is_string = false;
    v->num = n.int_ok                              ? n.int_value
             : (n.value > -9e18 && n.value < 9e18) ? static_cast<int64_t>(n.value)
                                                   : 0;
  } else {
    v->present = false;
    cur_->skip_value();
  }
}

int64_t EventObjectReader::read_int_or(int64_t fallback, bool* numeric) {
  const JsonType t = cur_->peek();
  if (t == JsonType::kNumber) {
    const JsonNumber n = cur_->read_number();
    if (numeric) *numeric = true;
    if (n.int_ok) return n.int_value;
    if (n.value > -9e18 && n.value < 9e18) return static_cast<int64_t>(n.value);
    return fallback;
  }
  if (t == JsonType::kString) {
    // HTA converts numeric strings too ("7"); "0x0" is not a number.
    cur_->read_string(&scratch_);
    int64_t v = 0;
    const char* b = scratch_.data();
    const char* e = b + scratch_.size();
    const auto r = std::from_chars(b, e, v);
    if (r.ec == std::errc() && r.ptr == e && !scratch_.empty()) {
      if (numeric) *numeric = true;
      return v;
    }
    return fallback;
  }
  cur_->skip_value();
  return fallback;
}

double EventObjectReader::read_double_or(double fallback) {
  if (cur_->peek() == JsonType::kNumber) return cur_->read_number().value;
  cur_->skip_value();
  return fallback;
}

void EventObjectReader::read(JsonCursor* cur, RawEvent* ev) {
  cur_ = cur;
  ev_ = ev;
  ev_->reset();
  cur_->begin_object();
  std::string_view key;
  while (cur_->next_key(&key, &key_)) {
    // The key's view dies with the next cursor call: it is classified first.
    switch (event_key(key)) {
      case EventKey::kPh:
        if (cur_->peek() == JsonType::kString) {
          cur_->read_string(&scratch_);
          ev_->ph = scratch_.size() == 1 ? scratch_[0] : '?';
        } else {
          cur_->skip_value();
        }
        break;
      case EventKey::kTs:
        read_time(&ev_->ts_ns, &ev_->has_ts, "timestamp out of range");
        break;
      case EventKey::kDur:
        read_time(&ev_->dur_ns, &ev_->has_dur, "duration out of range");
        break;
      case EventKey::kName:
        if (cur_->peek() == JsonType::kString) {
          cur_->read_string(&name_);
          ev_->name = name_;
        } else {
          cur_->skip_value();
        }
        break;
      case EventKey::kCat:
        if (cur_->peek() == JsonType::kString) {
          cur_->read_string(&cat_);
          ev_->cat = cat_;
          ev_->has_cat = true;
        } else {
          cur_->skip_value();
        }
        break;
      case EventKey::kPid:
        read_id(&ev_->pid, &pid_);
        break;
      case EventKey::kTid:
        read_id(&ev_->tid, &tid_);
        break;
      case EventKey::kId: {
        bool numeric = false;
        const int64_t v = read_int_or(0, &numeric);
        ev_->flow_id = static_cast<uint64_t>(v);
        ev_->has_flow_id = numeric;
        break;
      }
      case EventKey::kArgs:
        if (cur_->peek() == JsonType::kObject) {
          read_args();
        } else {
          cur_->skip_value();
        }
        break;
      case EventKey::kOther:
        cur_->skip_value();
        break;
    }
  }
}

// A µs time as exact ns; a non-number is skipped.
void EventObjectReader::read_time(int64_t* ns, bool* has, const char* out_of_range) {
  if (cur_->peek() != JsonType::kNumber) {
    cur_->skip_value();
    return;
  }
  const JsonNumber v = cur_->read_number(/*want_value=*/false);
  if (!v.ns_ok || v.micros_to_ns >= kMaxNs || v.micros_to_ns <= -kMaxNs) cur_->fail(out_of_range);
  *ns = v.micros_to_ns;
  *has = true;
}

void EventObjectReader::read_args() {
  cur_->begin_object();
  std::string_view key;
  while (cur_->next_key(&key, &arg_key_)) {
    const ArgKey k = arg_key(key);
    const JsonType t = cur_->peek();
    switch (k) {
      case ArgKey::kStream: {
        bool numeric = false;
        const int64_t v = read_int_or(-1, &numeric);
        ev_->stream_numeric = numeric;
        ev_->stream = numeric ? v : -1;
        continue;
      }
      case ArgKey::kCorrelation:
        ev_->correlation = read_int_or(0);
        continue;
      case ArgKey::kExternalId:
        ev_->external_id = read_int_or(-1);
        continue;
      case ArgKey::kDevice: {
        bool numeric = false;
        ev_->device = read_int_or(-1, &numeric);
        ev_->has_device = numeric;
        continue;
      }
      case ArgKey::kBytes:
        ev_->bytes = read_int_or(-1);
        continue;
      case ArgKey::kMemBw:
        if (t != JsonType::kNumber) break;
        ev_->mem_bw = cur_->read_number().value;
        ev_->has_mem_bw = true;
        continue;
      case ArgKey::kMemBytes:
        ev_->mem_bytes = read_int_or(0);
        ev_->has_mem = true;
        continue;
      case ArgKey::kTotalAllocated:
        ev_->total_allocated = read_double_or(0);
        continue;
      case ArgKey::kTotalReserved:
        ev_->total_reserved = read_double_or(0);
        continue;
      case ArgKey::kInNelems:
        ev_->in_nelems = read_int_or(-1);
        continue;
      case ArgKey::kDtype:
      case ArgKey::kName:
      case ArgKey::kDirection:
        if (t != JsonType::kString) break;
        if (k == ArgKey::kDtype) {
          cur_->read_string(&dtype_);
          ev_->dtype = dtype_;
        } else if (k == ArgKey::kName) {
          cur_->read_string(&arg_name_);
          ev_->arg_name = arg_name_;
        } else {
          cur_->read_string(&direction_);
          ev_->direction = direction_;
        }
        continue;
      case ArgKey::kOther:
        break;
    }
    // Any other number (the first) is a counter event's value; events whose phase came first
    // and is not 'C' do not need it converted.
    if (!ev_->has_counter_value && t == JsonType::kNumber && (ev_->ph == 0 || ev_->ph == 'C')) {
      ev_->counter_value = cur_->read_number().value;
      ev_->has_counter_value = true;
    } else {
      cur_->skip_value();
    }
  }
}

}  // namespace ft::profiler::kineto

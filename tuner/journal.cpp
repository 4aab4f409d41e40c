// journal.cpp: append-only JSONL trial journal with fsync per line and torn-tail recovery.
#include "ft/tuner/journal.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"

namespace ft::tuner {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// JSON has no NaN/inf: a non-finite number is written as null and read back as NaN.
json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

double get_num(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nan("");
  if (!j[key].is_number()) throw FormatError(fmt::format("field '{}' is not a number", key));
  return j[key].get<double>();
}

json num_array(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v) a.push_back(num(x));
  return a;
}

std::vector<double> get_array(const json& j, const char* key) {
  std::vector<double> out;
  if (!j.contains(key)) return out;
  if (!j[key].is_array()) throw FormatError(fmt::format("field '{}' is not an array", key));
  for (const auto& x : j[key]) out.push_back(x.is_number() ? x.get<double>() : std::nan(""));
  return out;
}

}  // namespace

json entry_to_json(const JournalEntry& e) {
  const TrialResult& r = e.result;
  json j;
  j["id"] = e.id;
  j["phase"] = e.phase;
  j["repeat"] = e.repeat;
  j["round"] = e.round;
  j["config"] = e.config;
  j["change"] = e.change;
  j["status"] = trial_status_name(r.status);
  j["reason"] = r.reason;
  j["skipped"] = e.skipped;
  j["tokens_per_s"] = num(r.tokens_per_s);
  j["step_ms"] = num(r.step_ms);
  j["step_tps_median"] = num(r.step_tps_median);
  j["step_tps_spread"] = num(r.step_tps_spread);
  j["measured_steps"] = r.measured_steps;
  j["mem_peak"] = num(r.mem_peak);
  j["predicted_mem"] = num(e.predicted_mem);
  j["final_loss"] = num(r.final_loss);
  j["wall_s"] = num(r.wall_s);
  j["exit_code"] = r.exit_code;
  j["losses"] = num_array(r.losses);
  j["tokens"] = num_array(r.tokens);
  if (e.machine_before > 0 || e.machine_after > 0) {
    j["machine_speed"] = {num(e.machine_before), num(e.machine_after)};
  }
  return j;
}

JournalEntry entry_from_json(const json& j, const std::string& where) {
  try {
    if (!j.is_object()) throw FormatError("not a JSON object");
    JournalEntry e;
    e.id = j.at("id").get<int>();
    e.phase = j.at("phase").get<std::string>();
    e.repeat = j.value("repeat", 0);
    e.round = j.value("round", 0);
    for (const auto& [k, v] : j.at("config").items()) e.config[k] = v.get<std::string>();
    e.change = j.value("change", std::string());
    e.skipped = j.value("skipped", false);
    TrialResult& r = e.result;
    const std::string status = j.at("status").get<std::string>();
    if (!parse_trial_status(status, &r.status)) {
      throw FormatError(fmt::format("unknown status '{}'", status));
    }
    r.reason = j.value("reason", std::string());
    r.tokens_per_s = get_num(j, "tokens_per_s");
    r.step_ms = get_num(j, "step_ms");
    r.step_tps_median = j.contains("step_tps_median") ? get_num(j, "step_tps_median") : 0;
    r.step_tps_spread = j.contains("step_tps_spread") ? get_num(j, "step_tps_spread") : 0;
    r.measured_steps = j.value("measured_steps", 0);
    r.mem_peak = get_num(j, "mem_peak");
    e.predicted_mem = get_num(j, "predicted_mem");
    r.final_loss = get_num(j, "final_loss");
    r.wall_s = get_num(j, "wall_s");
    r.exit_code = j.value("exit_code", 0);
    r.losses = get_array(j, "losses");
    r.tokens = get_array(j, "tokens");
    if (j.contains("machine_speed")) {
      const std::vector<double> m = get_array(j, "machine_speed");
      if (m.size() != 2) throw FormatError("machine_speed is not [before, after]");
      e.machine_before = std::isfinite(m[0]) ? m[0] : 0;
      e.machine_after = std::isfinite(m[1]) ? m[1] : 0;
    }
    if (!std::isfinite(r.tokens_per_s)) r.tokens_per_s = 0;
    if (!std::isfinite(r.wall_s)) r.wall_s = 0;
    if (!std::isfinite(e.predicted_mem)) e.predicted_mem = 0;
    return e;
  } catch (const json::exception& ex) {
    throw FormatError(fmt::format("{}: not a journal entry: {}", where, ex.what()));
  } catch (const FormatError& ex) {
    throw FormatError(fmt::format("{}: not a journal entry: {}", where, ex.what()));
  }
}

Journal::Journal(fs::path path, bool resume) : path_(std::move(path)) {
  std::string text;
  if (fs::exists(path_)) text = read_file(path_);
  if (!text.empty() && !resume) {
    throw ConfigError(fmt::format(
        "{} already holds a sweep; pass --resume to continue it or choose another --out",
        path_.string()));
  }
  size_t good_end = 0;  // byte offset after the last complete, valid line
  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    ++line_no;
    const bool complete = nl != std::string::npos;
    const std::string line = text.substr(pos, complete ? nl - pos : std::string::npos);
    const size_t next = complete ? nl + 1 : text.size();
    const bool last = next >= text.size();
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!complete || j.is_discarded()) {
      if (last) break;  // torn tail of a killed writer: dropped below
      throw FormatError(
          fmt::format("{}:{} (byte {}): unparsable journal line", path_.string(), line_no, pos));
    }
    try {
      entries_.push_back(entry_from_json(j, fmt::format("{}:{}", path_.string(), line_no)));
    } catch (const FormatError&) {
      if (last) break;
      throw;
    }
    if (entries_.back().id != static_cast<int>(entries_.size()) - 1) {
      throw FormatError(fmt::format("{}:{}: trial id {} out of sequence (expected {})",
                                    path_.string(), line_no, entries_.back().id,
                                    entries_.size() - 1));
    }
    good_end = next;
    pos = next;
  }
  dropped_bytes_ = text.size() - good_end;
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT, 0644);
  if (fd_ < 0) {
    throw IoError(fmt::format("cannot open journal {}: {}", path_.string(), std::strerror(errno)));
  }
  if (::ftruncate(fd_, static_cast<off_t>(good_end)) != 0 ||
      ::lseek(fd_, static_cast<off_t>(good_end), SEEK_SET) < 0 || ::fsync(fd_) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw IoError(
        fmt::format("cannot truncate journal {}: {}", path_.string(), std::strerror(err)));
  }
}

Journal::~Journal() {
  if (fd_ >= 0) ::close(fd_);
}

const JournalEntry* Journal::find(int id) const {
  if (id < 0 || id >= static_cast<int>(entries_.size())) return nullptr;
  return &entries_[static_cast<size_t>(id)];
}

void Journal::append(const JournalEntry& e) {
  const std::string line = entry_to_json(e).dump() + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw IoError(
          fmt::format("cannot append to journal {}: {}", path_.string(), std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd_) != 0) {
    throw IoError(fmt::format("cannot fsync journal {}: {}", path_.string(), std::strerror(errno)));
  }
  entries_.push_back(e);
}

}  // namespace ft::tuner

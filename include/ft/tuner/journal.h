// journal.h: the tuner's append-only, fsync'd JSONL trial journal that makes a sweep resumable.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ft/tuner/trial.h"

namespace ft::tuner {

// One journal line: a trial that ran (or was skipped before running) and what it measured.
struct JournalEntry {
  int id = 0;            // sequential from 0; a sweep's decisions depend only on seed + results
  std::string phase;     // baseline | trial | repeat | confirm | verify | verify-baseline | grid
  int repeat = 0;        // repetition index within a repeated measurement
  int round = 0;         // guided: the diagnosis round that proposed it
  Config config;         // the full ft-train flags the trial ran with (without --metrics)
  std::string change;    // the change against the incumbent, e.g. "precision bf16"
  bool skipped = false;  // not run (e.g. predicted out of memory); status is rejected
  double predicted_mem = 0;  // bytes, from the memory model (0 when unknown)
  // The machine's speed (SweepOptions::machine_probe) just before and after the trial ran;
  // 0 when not probed. Journaled so a resumed sweep replays the same round decisions.
  double machine_before = 0, machine_after = 0;
  TrialResult result;        // status, reason, tokens_per_s, step_ms, mem_peak, final_loss, curve
};

nlohmann::json entry_to_json(const JournalEntry& e);
// Throws FormatError naming `where` on a line that is not a journal entry.
JournalEntry entry_from_json(const nlohmann::json& j, const std::string& where);

// DIR/journal.jsonl. Every append is one write() of a whole line followed by fsync(), so a
// kill -9 leaves at most a torn last line.
class Journal {
 public:
  // Opens `path`. With `resume` the existing entries are read back; a torn or unparsable last
  // line (a killed writer) is dropped and the file truncated to the last complete line. A bad
  // line before the last is a FormatError (file and line). Without `resume` an existing
  // non-empty journal is a ConfigError (use --resume), so results are never mixed silently.
  Journal(std::filesystem::path path, bool resume);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  const std::vector<JournalEntry>& entries() const { return entries_; }
  const JournalEntry* find(int id) const;                  // nullptr when not journaled
  void append(const JournalEntry& e);                      // throws IoError
  size_t dropped_bytes() const { return dropped_bytes_; }  // torn tail removed on open
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::vector<JournalEntry> entries_;
  size_t dropped_bytes_ = 0;
};

}  // namespace ft::tuner

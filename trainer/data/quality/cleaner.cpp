// cleaner.cpp: the cleaning pipeline (filters, exact and near dedup in batches) and its statistics.
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>

#include "ft/core/error.h"
#include "ft/trainer/quality.h"

namespace ft::trainer::data {

uint64_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

uint64_t CleanStats::docs_removed() const {
  uint64_t n = exact_dups + near_dups;
  for (uint64_t r : rule_docs) n += r;
  return n;
}

nlohmann::json CleanStats::to_json() const {
  nlohmann::json rules = nlohmann::json::object();
  for (int i = 0; i < kRuleCount; ++i) {
    rules[rule_name(static_cast<Rule>(i))] = {{"docs", rule_docs[i]}, {"bytes", rule_bytes[i]}};
  }
  return {{"in", {{"docs", docs_in}, {"bytes", bytes_in}}},
          {"exact_duplicates", {{"docs", exact_dups}, {"bytes", exact_dup_bytes}}},
          {"near_duplicates", {{"docs", near_dups}, {"bytes", near_dup_bytes}}},
          {"filters", rules},
          {"boilerplate_lines_removed", boilerplate_lines_removed},
          {"removed", {{"docs", docs_removed()}}},
          {"kept", {{"docs", docs_kept}, {"bytes", bytes_kept}}},
          {"bad_lines_skipped", bad_lines_skipped},
          {"lsh",
           {{"num_perm", num_perm},
            {"bands", lsh.bands},
            {"rows", lsh.rows},
            {"false_positive_area", lsh.false_positive},
            {"false_negative_area", lsh.false_negative},
            {"candidate_pairs", candidate_pairs},
            {"jaccard_checks", jaccard_checks},
            {"peak_held_sets", peak_held_sets}}},
          {"memory",
           {{"exact_index_bytes", exact_index_bytes},
            {"near_index_bytes", near_index_bytes},
            {"peak_rss_bytes", peak_rss_bytes}}},
          {"seconds", seconds}};
}

std::string CleanStats::to_table() const {
  std::string s;
  auto row = [&s, this](const std::string& name, uint64_t docs, uint64_t bytes) {
    const double pct =
        docs_in ? 100.0 * static_cast<double>(docs) / static_cast<double>(docs_in) : 0;
    s += fmt::format("  {:<24} {:>12} {:>7.2f}% {:>15}\n", name, docs, pct, bytes);
  };
  s += fmt::format("  {:<24} {:>12} {:>8} {:>15}\n", "", "documents", "", "bytes");
  row("in", docs_in, bytes_in);
  row("exact duplicates", exact_dups, exact_dup_bytes);
  row("near duplicates", near_dups, near_dup_bytes);
  for (int i = 0; i < kRuleCount; ++i) {
    row(fmt::format("filter {}", rule_name(static_cast<Rule>(i))), rule_docs[i], rule_bytes[i]);
  }
  row("kept", docs_kept, bytes_kept);
  if (bad_lines_skipped) s += fmt::format("  bad input lines skipped: {}\n", bad_lines_skipped);
  s += fmt::format("  boilerplate lines dropped from kept documents: {}\n",
                   boilerplate_lines_removed);
  if (lsh.bands > 0) {
    s += fmt::format(
        "  MinHash LSH: {} permutations, {} bands x {} rows; index {:.1f} MiB, exact {:.1f} MiB; "
        "{} candidate pairs, {} exact Jaccards, at most {} shingle sets held\n",
        num_perm, lsh.bands, lsh.rows, near_index_bytes / 1048576.0, exact_index_bytes / 1048576.0,
        candidate_pairs, jaccard_checks, peak_held_sets);
  }
  s += fmt::format("  {:.2f} s, peak RSS {:.1f} MiB\n", seconds, peak_rss_bytes / 1048576.0);
  return s;
}

Cleaner::Cleaner(CleanOptions options, Sink sink)
    : Cleaner(std::move(options), DecisionSink([sink = std::move(sink)](const CleanDecision& d) {
                if (d.kept) sink(d.text);
              })) {}

Cleaner::Cleaner(CleanOptions options, DecisionSink sink)
    : options_(std::move(options)),
      sink_(std::move(sink)),
      hasher_(options_.minhash),
      near_(options_.minhash) {
  if (options_.batch_docs == 0) options_.batch_docs = 1;
  if (options_.near_dedup) {
    stats_.lsh = near_.params();
    stats_.num_perm = options_.minhash.num_perm;
  }
  batch_.reserve(options_.batch_docs);
}

void Cleaner::add(std::string_view text) {
  batch_.emplace_back(text);
  batch_bytes_ += text.size();
  if (batch_.size() >= options_.batch_docs || batch_bytes_ >= options_.batch_bytes) process_batch();
}

void Cleaner::finish() {
  if (!batch_.empty()) process_batch();
  for (const auto& [doc, range] : cands_) {
    for (uint64_t j = range.first; j < range.first + range.second; ++j) ++needed_[cand_list_[j]];
  }
  stats_.exact_index_bytes = exact_.memory_bytes();
  stats_.near_index_bytes = near_.memory_bytes() + near_ordinal_.capacity() * sizeof(uint64_t) +
                            kind_.capacity() + cand_list_.capacity() * sizeof(uint64_t);
  stats_.peak_rss_bytes = peak_rss_bytes();
}

void Cleaner::decide(CleanDecision& d, uint64_t bytes, const FilterResult* r, int filter) {
  ++stats_.docs_in;
  stats_.bytes_in += bytes;
  if (d.kept) {
    ++stats_.docs_kept;
    stats_.bytes_kept += d.text.size();
    if (r) stats_.boilerplate_lines_removed += r->lines_removed;
  } else if (d.rule == "exact_duplicate") {
    ++stats_.exact_dups;
    stats_.exact_dup_bytes += bytes;
  } else if (d.rule == "near_duplicate") {
    ++stats_.near_dups;
    stats_.near_dup_bytes += bytes;
  } else if (filter >= 0) {
    ++stats_.rule_docs[filter];
    stats_.rule_bytes[filter] += bytes;
  }
  sink_(d);
}

// The first pass: filters, exact copies and (with near dedup) each document's candidates.
void Cleaner::process_batch() {
  const int64_t n = static_cast<int64_t>(batch_.size());
  const int np = hasher_.num_perm();
  const bool near = options_.near_dedup;
  std::vector<FilterResult> results(n);
  std::vector<Hash128> hashes(n);
  std::vector<uint32_t> sigs(near ? static_cast<size_t>(n) * np : 0);
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t i = 0; i < n; ++i) {
    results[i] = apply_filters(batch_[i], options_.filters);
    if (results[i].rejected) continue;
    hashes[i] = content_hash(results[i].text);
    if (near) hasher_.signature(results[i].text, sigs.data() + i * np);
  }
  std::vector<uint32_t> cands;
  const double min_estimate = options_.minhash.threshold - options_.minhash.prefilter_margin;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bytes = batch_[i].size();
    const FilterResult& r = results[i];
    CleanDecision d;
    d.ordinal = near ? kind_.size() : stats_.docs_in;
    int64_t hit = -1;
    if (r.rejected) {
      d.rule = rule_name(*r.rejected);
      if (near) kind_.push_back(static_cast<uint8_t>(*r.rejected));
    } else if (options_.exact_dedup && (hit = exact_.insert_or_find(hashes[i], d.ordinal)) >= 0) {
      d.rule = "exact_duplicate";
      d.duplicate_of = hit;
      d.similarity = 1;
      if (near) {
        kind_.push_back(kExactDup);
        exact_of_.emplace(d.ordinal, static_cast<uint64_t>(hit));
      }
    } else if (near) {
      const uint32_t* sig = sigs.data() + i * np;
      near_.candidates(sig, min_estimate, &cands);
      uint8_t kind = kUnique;
      if (!cands.empty()) {
        cands_.emplace(d.ordinal, std::make_pair(uint64_t{cand_list_.size()},
                                                 static_cast<uint32_t>(cands.size())));
        for (const uint32_t c : cands) cand_list_.push_back(near_ordinal_[c]);
        stats_.candidate_pairs += cands.size();
        kind = kHasCandidates;
      }
      near_.insert(sig);
      near_ordinal_.push_back(d.ordinal);
      if (r.lines_removed > 0 || r.text.size() != bytes) kind |= kCleaned;
      kind_.push_back(kind);
    } else {
      d.kept = true;
      d.text = r.text;
      d.text_changed = r.lines_removed > 0 || r.text.size() != bytes;
    }
    if (!near) decide(d, bytes, &r, r.rejected ? static_cast<int>(*r.rejected) : -1);
  }
  batch_.clear();
  batch_bytes_ = 0;
}

void Cleaner::verify(std::string_view text) {
  batch_.emplace_back(text);
  batch_bytes_ += text.size();
  if (batch_.size() >= options_.batch_docs || batch_bytes_ >= options_.batch_bytes) verify_batch();
}

void Cleaner::finish_verify() {
  if (!batch_.empty()) verify_batch();
  if (verified_ != kind_.size()) {
    throw Error(
        fmt::format("near dedup: the second pass read {} documents, the first {}: the "
                    "input changed between them",
                    verified_, kind_.size()));
  }
  stats_.peak_rss_bytes = peak_rss_bytes();
}

// The second pass: each candidate list checked by exact Jaccard against the kept candidates.
void Cleaner::verify_batch() {
  const int64_t n = static_cast<int64_t>(batch_.size());
  const uint64_t base = verified_;
  if (base + n > kind_.size()) {
    throw Error(
        fmt::format("near dedup: the second pass read more than the first pass's {} "
                    "documents: the input changed between them",
                    kind_.size()));
  }
  const MinHashOptions& m = options_.minhash;
  std::vector<FilterResult> cleaned(n);
  std::vector<std::vector<uint64_t>> sets(n);
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t k = kind_[base + i], kind = k & ~kCleaned;
    if (kind != kUnique && kind != kHasCandidates) continue;  // filtered or an exact copy
    std::string_view text = batch_[i];
    if (k & kCleaned) {
      cleaned[i] = apply_filters(batch_[i], options_.filters);
      text = cleaned[i].text;
    }
    if (kind == kHasCandidates || needed_.count(base + i)) {
      sets[i] = shingle_hashes(text, m.shingle, m.shingle_size);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t ord = base + static_cast<uint64_t>(i);
    const uint8_t k = kind_[ord], kind = k & ~kCleaned;
    CleanDecision d;
    d.ordinal = ord;
    if (kind < kRuleCount) {
      d.rule = rule_name(static_cast<Rule>(kind));
    } else if (kind == kExactDup) {
      d.rule = "exact_duplicate";
      d.duplicate_of = static_cast<int64_t>(exact_of_.at(ord));
      d.similarity = 1;
    } else {
      if ((k & kCleaned) && cleaned[i].rejected) {
        throw Error(
            fmt::format("near dedup: document {} passed the filters in the first pass "
                        "and not in the second: the input changed between them",
                        ord));
      }
      if (kind == kHasCandidates) {
        const auto [off, count] = cands_.at(ord);
        for (uint64_t j = off; j < off + count; ++j) {
          const uint64_t c = cand_list_[j];
          if (d.duplicate_of < 0 && (kind_[c] & ~kCleaned) == kKept) {
            const auto held = sets_.find(c);
            if (held != sets_.end()) {
              ++stats_.jaccard_checks;
              const double jac = set_jaccard(sets[i], held->second);
              if (jac >= m.threshold) {
                d.duplicate_of = static_cast<int64_t>(c);
                d.similarity = jac;
              }
            }
          }
          const auto need = needed_.find(c);
          if (need != needed_.end() && --need->second == 0) {
            needed_.erase(need);
            sets_.erase(c);
          }
        }
      }
      if (d.duplicate_of >= 0) {
        d.rule = "near_duplicate";
        kind_[ord] = static_cast<uint8_t>(kNearDup | (k & kCleaned));
      } else {
        kind_[ord] = static_cast<uint8_t>(kKept | (k & kCleaned));
        d.kept = true;
        d.text = (k & kCleaned) ? std::string_view(cleaned[i].text) : std::string_view(batch_[i]);
        d.text_changed = (k & kCleaned) != 0;
        if (needed_.count(ord)) {
          sets_.emplace(ord, std::move(sets[i]));
          stats_.peak_held_sets = std::max<uint64_t>(stats_.peak_held_sets, sets_.size());
        }
      }
    }
    decide(d, batch_[i].size(), (k & kCleaned) ? &cleaned[i] : nullptr,
           kind < kRuleCount ? static_cast<int>(kind) : -1);
  }
  verified_ += static_cast<uint64_t>(n);
  batch_.clear();
  batch_bytes_ = 0;
}

}  // namespace ft::trainer::data

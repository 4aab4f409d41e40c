// cleaner.cpp: the cleaning pipeline (filters, exact and near dedup in batches) and its statistics.
#include <fmt/format.h>
#include <sys/resource.h>

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
            {"false_negative_area", lsh.false_negative}}},
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
        "  MinHash LSH: {} permutations, {} bands x {} rows; index {:.1f} MiB, exact {:.1f} MiB\n",
        num_perm, lsh.bands, lsh.rows, near_index_bytes / 1048576.0, exact_index_bytes / 1048576.0);
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
  stats_.exact_index_bytes = exact_.memory_bytes();
  stats_.near_index_bytes = near_.memory_bytes();
  stats_.peak_rss_bytes = peak_rss_bytes();
}

void Cleaner::process_batch() {
  const int64_t n = static_cast<int64_t>(batch_.size());
  const int np = hasher_.num_perm();
  std::vector<FilterResult> results(n);
  std::vector<Hash128> hashes(n);
  std::vector<uint32_t> sigs(options_.near_dedup ? static_cast<size_t>(n) * np : 0);
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t i = 0; i < n; ++i) {
    results[i] = apply_filters(batch_[i], options_.filters);
    if (results[i].rejected) continue;
    hashes[i] = content_hash(results[i].text);
    if (options_.near_dedup) hasher_.signature(results[i].text, sigs.data() + i * np);
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bytes = batch_[i].size();
    CleanDecision d;
    d.ordinal = stats_.docs_in;
    ++stats_.docs_in;
    stats_.bytes_in += bytes;
    const FilterResult& r = results[i];
    int64_t hit = -1;
    if (r.rejected) {
      const int k = static_cast<int>(*r.rejected);
      ++stats_.rule_docs[k];
      stats_.rule_bytes[k] += bytes;
      d.rule = rule_name(*r.rejected);
    } else if (options_.exact_dedup &&
               (hit = exact_.insert_or_find(hashes[i], d.ordinal)) >= 0) {
      ++stats_.exact_dups;
      stats_.exact_dup_bytes += bytes;
      d.rule = "exact_duplicate";
      d.duplicate_of = hit;
      d.similarity = 1;
    } else if (options_.near_dedup &&
               (hit = near_.insert_or_match(sigs.data() + i * np)) >= 0) {
      ++stats_.near_dups;
      stats_.near_dup_bytes += bytes;
      d.rule = "near_duplicate";
      d.duplicate_of = static_cast<int64_t>(near_ordinal_[static_cast<size_t>(hit)]);
      d.similarity = estimate_jaccard(sigs.data() + i * np, near_.signature(hit), np);
    } else {
      if (options_.near_dedup) near_ordinal_.push_back(d.ordinal);
      ++stats_.docs_kept;
      stats_.bytes_kept += r.text.size();
      stats_.boilerplate_lines_removed += r.lines_removed;
      d.kept = true;
      d.text = r.text;
      d.text_changed = r.lines_removed > 0 || r.text.size() != bytes;
    }
    sink_(d);
  }
  batch_.clear();
  batch_bytes_ = 0;
}

}  // namespace ft::trainer::data

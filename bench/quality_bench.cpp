// quality_bench.cpp: ft-data clean's speed and memory (exact dedup MB/s on one core, near dedup
// over ~100 MB on 2 threads) and MinHash-LSH precision/recall on labelled KJV+fortune pairs.
#include <fmt/format.h>
#include <omp.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/trainer/data.h"
#include "ft/trainer/documents.h"
#include "ft/trainer/quality.h"

namespace {

namespace fs = std::filesystem;
using namespace ft::trainer::data;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// User + system CPU seconds of this process (the machine is shared: wall time alone misleads).
double cpu_seconds() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// KJV chapters plus every Debian fortune file (those without an extension) when installed.
std::vector<std::string> base_documents() {
  std::vector<fs::path> paths = {kjv_text_path()};
  const fs::path fortunes = "/usr/share/games/fortunes";
  if (fs::is_directory(fortunes)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(fortunes)) {
      if (e.is_regular_file() && !e.path().has_extension()) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    paths.insert(paths.end(), files.begin(), files.end());
  } else {
    fmt::print("note: {} missing (Debian package fortunes); KJV only\n", fortunes.string());
  }
  std::vector<std::string> docs;
  for_each_document(paths, [&](std::string_view t, const DocumentOrigin&) {
    docs.emplace_back(t);
    return true;
  });
  return docs;
}

// Replaces a fraction `rate` of the words of `text` with words of `other` (seeded).
std::string perturb(const std::string& text, const std::string& other, double rate,
                    std::mt19937_64& rng) {
  if (rate <= 0) return text;
  std::string out;
  out.reserve(text.size() + 16);
  std::uniform_real_distribution<double> u(0, 1);
  size_t i = 0, j = 0;
  while (i < text.size()) {
    const size_t e = std::min(text.find_first_of(" \n", i), text.size());
    if (u(rng) < rate && !other.empty()) {
      size_t oe = other.find_first_of(" \n", j);
      if (oe == std::string::npos) j = 0, oe = std::min(other.find_first_of(" \n"), other.size());
      out.append(other, j, oe - j);
      j = oe + 1 >= other.size() ? 0 : oe + 1;
    } else {
      out.append(text, i, e - i);
    }
    if (e < text.size()) out += text[e];
    i = e + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  double target_mb = 100;
  int threads = 2;
  std::string write_corpus;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mb" && i + 1 < argc)
      target_mb = std::atof(argv[++i]);
    else if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--write-corpus" && i + 1 < argc)
      write_corpus = argv[++i];
    else {
      fmt::print(stderr, "usage: quality_bench [--mb 100] [--threads 2] [--write-corpus FILE]\n");
      return 2;
    }
  }
  const std::vector<std::string> base = base_documents();
  size_t base_bytes = 0;
  for (const auto& d : base) base_bytes += d.size();
  fmt::print("base: {} documents, {:.1f} MB (KJV chapters + fortunes)\n", base.size(),
             base_bytes / 1e6);

  // Corpus: copy 0 is the base; copy c re-draws each document with 2c% of its words replaced.
  auto t0 = Clock::now();
  std::vector<std::string> corpus;
  size_t bytes = 0;
  std::mt19937_64 rng(42);
  for (int copy = 0; bytes < target_mb * 1e6; ++copy) {
    for (size_t i = 0; i < base.size() && bytes < target_mb * 1e6; ++i) {
      corpus.push_back(perturb(base[i], base[(i * 7919 + copy) % base.size()], 0.02 * copy, rng));
      bytes += corpus.back().size();
    }
  }
  fmt::print("corpus: {} documents, {:.1f} MB (built in {:.1f} s)\n", corpus.size(), bytes / 1e6,
             seconds_since(t0));
  if (!write_corpus.empty()) {
    std::string text;
    for (const auto& d : corpus) text += d + "\n\n";
    ft::write_file_atomic(write_corpus, text);
    fmt::print("wrote {}\n", write_corpus);
  }
  const uint64_t rss_corpus = peak_rss_bytes();

  // 1. Exact dedup on one core: hash + table insert, best of 3.
  double best = 1e30;
  size_t uniques = 0;
  for (int rep = 0; rep < 3; ++rep) {
    ExactDeduper d;
    t0 = Clock::now();
    size_t u = 0;
    for (const auto& doc : corpus) u += d.insert(doc);
    best = std::min(best, seconds_since(t0));
    uniques = u;
  }
  fmt::print("exact dedup, 1 thread: {:.0f} MB/s ({:.3f} s, {} unique of {})\n", bytes / 1e6 / best,
             best, uniques, corpus.size());

  // 2. Near dedup (signatures in parallel, index in order) on `threads` threads.
  omp_set_num_threads(threads);
  for (const bool filters : {false, true}) {
    CleanOptions o;
    o.filters.enabled = filters;
    size_t kept_bytes = 0;
    Cleaner c(o, [&](std::string_view t) { kept_bytes += t.size(); });
    t0 = Clock::now();
    const double cpu0 = cpu_seconds();
    for (const auto& doc : corpus) c.add(doc);
    c.finish();
    if (c.needs_second_pass()) {
      for (const auto& doc : corpus) c.verify(doc);
      c.finish_verify();
    }
    const double s = seconds_since(t0), cpu = cpu_seconds() - cpu0;
    const CleanStats& st = c.stats();
    fmt::print(
        "clean ({}), {} threads: {:.1f} s = {:.1f} MB/s ({:.1f} CPU s); exact {} near {} kept {}; "
        "LSH {}x{}; "
        "near index {:.1f} MiB = {:.0f} B per kept doc, exact index {:.1f} MiB; peak RSS {:.0f} "
        "MiB "
        "(corpus in memory: {:.0f} MiB)\n",
        filters ? "filters + exact + near" : "exact + near", threads, s, bytes / 1e6 / s, cpu,
        st.exact_dups, st.near_dups, st.docs_kept, st.lsh.bands, st.lsh.rows,
        st.near_index_bytes / 1048576.0,
        double(st.near_index_bytes) / std::max<uint64_t>(1, st.docs_kept),
        st.exact_index_bytes / 1048576.0, st.peak_rss_bytes / 1048576.0, rss_corpus / 1048576.0);
    if (filters) {
      for (int r = 0; r < kRuleCount; ++r) {
        fmt::print("  filter {:<16} {:>8} docs\n", rule_name(static_cast<Rule>(r)),
                   st.rule_docs[r]);
      }
    }
  }

  // 3. Precision / recall on labelled pairs of real text (documents of >= 50 words): LSH bands
  // chosen for recall, every candidate decided by its exact Jaccard (the Cleaner's rule).
  std::vector<std::string> long_docs;
  for (const auto& d : base) {
    if (text_signals(d).words >= 50) long_docs.push_back(d);
  }
  const std::vector<double> rates = {0.0,  0.005, 0.01, 0.015, 0.02, 0.025, 0.03,
                                     0.04, 0.05,  0.07, 0.1,   0.2,  0.5};
  for (const double threshold : {0.5, 0.6, 0.7, 0.8, 0.9, 0.95}) {
    MinHashOptions mo;
    mo.threshold = threshold;
    const auto pairs = make_labelled_pairs(long_docs, rates, 200, mo, 1234);
    size_t pos = 0;
    for (const auto& p : pairs) pos += p.true_jaccard >= threshold;
    const NearDupEval e = evaluate_near_dup(pairs, mo);
    const LshParams lp = recall_lsh_params(threshold, mo.num_perm);
    fmt::print(
        "labelled pairs, J >= {:.2f} ({} bands x {} rows): {} pairs ({} positive); precision "
        "{:.4f} recall {:.4f} (tp {} fp {} fn {} tn {})\n",
        threshold, lp.bands, lp.rows, pairs.size(), pos, e.precision(), e.recall(), e.tp, e.fp,
        e.fn, e.tn);
    if (threshold != 0.8) continue;
    // Recall by true Jaccard, and the edits of up to 3% of the words the issue names.
    for (double lo = 0.8; lo < 1.0; lo += 0.05) {
      std::vector<LabelledPair> bucket;
      for (const auto& p : pairs) {
        if (p.true_jaccard >= lo && (p.true_jaccard < lo + 0.05 || lo + 0.05 >= 1.0))
          bucket.push_back(p);
      }
      const NearDupEval b = evaluate_near_dup(bucket, mo);
      fmt::print("  J in [{:.2f}, {:.2f}{}: {} pairs, recall {:.4f}\n", lo,
                 std::min(1.0, lo + 0.05), lo + 0.05 >= 1.0 ? "]" : ")", bucket.size(), b.recall());
    }
    std::vector<LabelledPair> small_edits;
    for (const auto& p : pairs) {
      if (p.edit_rate <= 0.03) small_edits.push_back(p);
    }
    const NearDupEval se = evaluate_near_dup(small_edits, mo);
    fmt::print("  edits <= 3% of words: {} pairs, {} at J >= 0.8: recall {:.4f} precision {:.4f}\n",
               small_edits.size(), se.tp + se.fn, se.recall(), se.precision());
  }

  // 4. The cleaner against an exhaustive all-pairs reference on a corpus small enough for it:
  // a document is a duplicate when an earlier kept one reaches J >= 0.8 (exact, every pair).
  {
    MinHashOptions mo;
    std::vector<std::string> small(long_docs.begin(),
                                   long_docs.begin() + std::min<size_t>(1500, long_docs.size()));
    const auto edits =
        make_labelled_pairs(small, {0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1}, 150, mo, 99);
    for (const auto& p : edits) small.push_back(p.b);
    std::vector<std::vector<uint64_t>> sets;
    for (const auto& d : small) sets.push_back(shingle_hashes(d, mo.shingle, mo.shingle_size));
    const auto r0 = Clock::now();
    std::vector<char> ref(small.size(), 0);
    for (size_t j = 0; j < small.size(); ++j) {
      for (size_t i = 0; i < j && !ref[j]; ++i) {
        if (!ref[i] && set_jaccard(sets[i], sets[j]) >= mo.threshold) ref[j] = 1;
      }
    }
    const double ref_s = seconds_since(r0);
    CleanOptions o;
    o.filters.enabled = false;
    std::vector<char> got(small.size(), 0);
    Cleaner c(o, [&](const CleanDecision& d) { got[d.ordinal] = !d.kept; });
    const auto c0 = Clock::now();
    for (const auto& d : small) c.add(d);
    c.finish();
    for (const auto& d : small) c.verify(d);
    c.finish_verify();
    const double clean_s = seconds_since(c0);
    size_t tp = 0, fp = 0, fn = 0;
    for (size_t j = 0; j < small.size(); ++j) {
      tp += got[j] && ref[j];
      fp += got[j] && !ref[j];
      fn += !got[j] && ref[j];
    }
    fmt::print(
        "all-pairs reference, {} documents ({:.1f} s exhaustive, {:.2f} s cleaner): {} removed by "
        "both, {} only by the cleaner, {} missed: recall {:.4f} precision {:.4f}; {} candidate "
        "pairs, {} exact Jaccards\n",
        small.size(), ref_s, clean_s, tp, fp, fn, tp + fn ? double(tp) / double(tp + fn) : 1.0,
        tp + fp ? double(tp) / double(tp + fp) : 1.0, c.stats().candidate_pairs,
        c.stats().jaccard_checks);
  }
  return 0;
}

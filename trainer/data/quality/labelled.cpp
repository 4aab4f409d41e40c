// labelled.cpp: labelled near-duplicate pairs (seeded word edits of real text) and their scoring.
#include <random>

#include "ft/core/error.h"
#include "ft/trainer/quality.h"

namespace ft::trainer::data {

namespace {

std::vector<std::string> tokens(std::string_view text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    const size_t b = i;
    while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i > b) out.emplace_back(text.substr(b, i - b));
  }
  return out;
}

std::string join(const std::vector<std::string>& words) {
  std::string s;
  for (const std::string& w : words) {
    if (!s.empty()) s += ' ';
    s += w;
  }
  return s;
}

}  // namespace

std::vector<LabelledPair> make_labelled_pairs(const std::vector<std::string>& docs,
                                              const std::vector<double>& edit_rates,
                                              size_t pairs_per_rate, const MinHashOptions& opts,
                                              uint64_t seed) {
  if (docs.size() < 2) throw ConfigError("labelled pairs need at least two documents");
  std::mt19937_64 rng(seed);
  std::vector<std::string> vocab;
  for (size_t d = 0; d < docs.size() && vocab.size() < 100000; ++d) {
    for (std::string& w : tokens(docs[d])) vocab.push_back(std::move(w));
  }
  if (vocab.empty()) throw ConfigError("labelled pairs need documents with words");
  std::uniform_int_distribution<size_t> pick_doc(0, docs.size() - 1);
  std::uniform_int_distribution<size_t> pick_word(0, vocab.size() - 1);
  std::uniform_real_distribution<double> u01(0, 1);
  std::vector<LabelledPair> pairs;
  for (double rate : edit_rates) {
    for (size_t k = 0; k < pairs_per_rate; ++k) {
      const std::vector<std::string> a = tokens(docs[pick_doc(rng)]);
      std::vector<std::string> b;
      b.reserve(a.size() + a.size() / 4);
      for (const std::string& w : a) {
        if (u01(rng) >= rate) {
          b.push_back(w);
          continue;
        }
        switch (rng() % 3) {
          case 0:
            b.push_back(vocab[pick_word(rng)]);
            break;  // substitute
          case 1:
            break;  // delete
          default:  // insert after
            b.push_back(w);
            b.push_back(vocab[pick_word(rng)]);
        }
      }
      LabelledPair p{join(a), join(b), 0, rate};
      p.true_jaccard = exact_jaccard(p.a, p.b, opts.shingle, opts.shingle_size);
      pairs.push_back(std::move(p));
    }
  }
  for (size_t k = 0; k < pairs_per_rate; ++k) {  // unrelated documents
    const size_t i = pick_doc(rng);
    size_t j = pick_doc(rng);
    if (j == i) j = (i + 1) % docs.size();
    LabelledPair p{join(tokens(docs[i])), join(tokens(docs[j])), 0, 1.0};
    p.true_jaccard = exact_jaccard(p.a, p.b, opts.shingle, opts.shingle_size);
    pairs.push_back(std::move(p));
  }
  return pairs;
}

NearDupEval evaluate_near_dup(const std::vector<LabelledPair>& pairs,
                              const MinHashOptions& opts_in) {
  MinHashOptions opts = opts_in;
  if (opts.bands == 0) {  // choose once, not per index
    const LshParams p = recall_lsh_params(opts.threshold, opts.num_perm);
    opts.bands = p.bands;
    opts.rows = p.rows;
  }
  const MinHasher hasher(opts);
  NearDupEval e;
  std::vector<uint32_t> cands;
  for (const LabelledPair& p : pairs) {
    NearDupIndex index(opts);
    index.insert(hasher.signature(p.a).data());
    index.candidates(hasher.signature(p.b).data(), opts.threshold - opts.prefilter_margin, &cands);
    // The Cleaner's second pass: a candidate is a duplicate when its exact Jaccard is.
    const bool predicted =
        !cands.empty() &&
        set_jaccard(shingle_hashes(p.a, opts.shingle, opts.shingle_size),
                    shingle_hashes(p.b, opts.shingle, opts.shingle_size)) >= opts.threshold;
    const bool label = p.true_jaccard >= opts.threshold;
    if (predicted && label)
      ++e.tp;
    else if (predicted)
      ++e.fp;
    else if (label)
      ++e.fn;
    else
      ++e.tn;
  }
  return e;
}

}  // namespace ft::trainer::data

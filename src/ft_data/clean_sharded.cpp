// clean_sharded.cpp: 'ft-data clean' across MPI ranks: content and band hashes exchanged by
// owner, candidate pairs verified where their shingle sets meet, rank 0 resolving the order.
#include "clean_sharded.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "clean_sharded_detail.h"
#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/trainer/documents.h"

namespace ft::data_cli {

namespace {

namespace fs = std::filesystem;
using trainer::Communicator;
using namespace trainer::data;
using namespace shard;

// The phases of the sharded run, in order; the state they hand on.
class ShardedCleaner {
 public:
  ShardedCleaner(const std::vector<fs::path>& inputs, const std::string& out,
                 const CleanOptions& clean, const CleanIoOptions& io, Communicator& world)
      : world(world),
        R(world.world_size()),
        me(world.rank()),
        out(out),
        clean(clean),
        io(io),
        m(clean.minhash),
        lsh(m),
        hasher(m),
        np(hasher.num_perm()),
        nb(lsh.params().bands),
        files(my_slices(inputs, me, R)) {}
  void sign();
  void exact_copies();
  void near_candidates();
  void verify_pairs();
  CleanStats write_output();

 private:
  int owner_of(uint64_t ord) const {
    return static_cast<int>(std::upper_bound(offset.begin(), offset.end(), ord) - offset.begin()) -
           1;
  }
  std::unordered_map<uint64_t, std::vector<uint64_t>> shingle_sets();
  void resolve(std::vector<std::string> edges);
  std::map<uint64_t, std::string> original_ids();
  static std::string part_of(const std::string& path, int rank) {
    return path + fmt::format(".part{}", rank);
  }
  void join_parts(const std::string& path) const;

  Communicator& world;
  const int R, me;
  const std::string out;
  const CleanOptions& clean;
  const CleanIoOptions& io;
  const MinHashOptions& m;
  const NearDupIndex lsh;  // the bands and their hashes, as one process would file them
  const MinHasher hasher;
  const int np, nb;
  const std::vector<Slice> files;  // this rank's slices of the input
  Pass1 p;
  std::vector<uint64_t> offset;                     // R + 1: the first global ordinal of each rank
  uint64_t base = 0;                                // this rank's first
  std::unordered_map<uint64_t, uint64_t> exact_of;  // local index -> global original
  std::map<uint64_t, std::vector<uint64_t>> cands;  // local index -> earlier global ordinals
  double candidate_pairs = 0;                       // over all ranks
  uint64_t jaccard_checks = 0;
  std::map<uint64_t, std::pair<uint64_t, double>> near_of;  // local index -> (original, J)
};

// Pass 1 on every rank; a rank that fails stops all of them at the first collective.
void ShardedCleaner::sign() {
  std::optional<Pass1> p1;
  std::string failure;
  try {
    p1.emplace(sign_local(files, clean, io, lsh, hasher));
  } catch (const std::exception& e) {
    failure = e.what();
  }
  double failed = failure.empty() ? 0 : 1;
  world.all_reduce_max(&failed, 1);
  if (failed > 0) {
    if (!failure.empty()) throw FormatError(failure);
    throw Error("another rank failed (its message is above)");
  }
  p = std::move(*p1);
  // Global ordinals: this rank's documents follow those of the ranks before it.
  std::vector<double> counts(static_cast<size_t>(R));
  const double mine = static_cast<double>(p.kind.size());
  world.all_gather(&mine, counts.data(), 1);
  offset.assign(static_cast<size_t>(R) + 1, 0);
  for (int r = 0; r < R; ++r) offset[r + 1] = offset[r] + static_cast<uint64_t>(counts[r]);
  base = offset[static_cast<size_t>(me)];
}

// Exact copies: every content hash to its owner, which names each copy's first occurrence.
void ShardedCleaner::exact_copies() {
  if (clean.exact_dedup) {
    std::vector<std::string> msg(static_cast<size_t>(R));
    for (size_t k = 0; k < p.passed.size(); ++k) {
      std::string& s = msg[p.hashes[k].lo % static_cast<uint64_t>(R)];
      put(s, p.hashes[k].lo);
      put(s, p.hashes[k].hi);
      put(s, base + p.passed[k]);
    }
    struct Rec {
      uint64_t lo, hi, ord;
    };
    std::vector<Rec> recs;
    for (const std::string& s : exchange(world, std::move(msg))) {
      for (size_t at = 0; at < s.size();)
        recs.push_back({get<uint64_t>(s, at), get<uint64_t>(s, at), get<uint64_t>(s, at)});
    }
    std::sort(recs.begin(), recs.end(), [](const Rec& a, const Rec& b) {
      return std::tie(a.lo, a.hi, a.ord) < std::tie(b.lo, b.hi, b.ord);
    });
    std::vector<std::string> dups(static_cast<size_t>(R));
    for (size_t g = 0; g < recs.size();) {
      size_t e = g + 1;
      for (; e < recs.size() && recs[e].lo == recs[g].lo && recs[e].hi == recs[g].hi; ++e) {
        std::string& s = dups[static_cast<size_t>(owner_of(recs[e].ord))];
        put(s, recs[e].ord);
        put(s, recs[g].ord);  // the first occurrence
      }
      g = e;
    }
    for (const std::string& s : exchange(world, std::move(dups))) {
      for (size_t at = 0; at < s.size();) {
        const uint64_t dup = get<uint64_t>(s, at), orig = get<uint64_t>(s, at);
        exact_of.emplace(dup - base, orig);
      }
    }
  }
}

// Near candidates: each band hash (with the 8-bit signature) to its owner, which pairs every
// document with the earlier ones filed under the same hash, prefiltered as one process does.
void ShardedCleaner::near_candidates() {
  const double min_estimate = m.threshold - m.prefilter_margin;
  if (clean.near_dedup) {
    std::vector<std::string> msg(static_cast<size_t>(R));
    for (size_t k = 0; k < p.passed.size(); ++k) {
      if (exact_of.count(p.passed[k])) continue;
      for (int b = 0; b < nb; ++b) {
        const uint32_t key = p.keys[k * nb + b];
        std::string& s =
            msg[(key ^ (static_cast<uint32_t>(b) * 0x9E3779B1u)) % static_cast<uint32_t>(R)];
        put(s, key);
        put(s, static_cast<uint32_t>(b));
        put(s, base + p.passed[k]);
        s.append(reinterpret_cast<const char*>(p.sig8.data() + k * np), static_cast<size_t>(np));
      }
    }
    struct Entry {
      uint32_t key, band;
      uint64_t ord;
      std::string sig;
    };
    std::vector<Entry> entries;
    for (const std::string& s : exchange(world, std::move(msg))) {
      for (size_t at = 0; at < s.size();) {
        Entry e{get<uint32_t>(s, at), get<uint32_t>(s, at), get<uint64_t>(s, at), s.substr(at, np)};
        at += static_cast<size_t>(np);
        entries.push_back(std::move(e));
      }
    }
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return std::tie(a.band, a.key, a.ord) < std::tie(b.band, b.key, b.ord);
    });
    std::vector<std::string> pairs(static_cast<size_t>(R));
    for (size_t g = 0; g < entries.size();) {
      size_t e = g + 1;
      while (e < entries.size() && entries[e].band == entries[g].band &&
             entries[e].key == entries[g].key)
        ++e;
      for (size_t j = g + 1; j < e; ++j) {
        for (size_t i = g; i < j; ++i) {
          const auto* a = reinterpret_cast<const uint8_t*>(entries[i].sig.data());
          const auto* b = reinterpret_cast<const uint8_t*>(entries[j].sig.data());
          if (estimate_jaccard_8bit(a, b, np) < min_estimate) continue;
          std::string& s = pairs[static_cast<size_t>(owner_of(entries[j].ord))];
          put(s, entries[j].ord);
          put(s, entries[i].ord);
        }
      }
      g = e;
    }
    for (const std::string& s : exchange(world, std::move(pairs))) {
      for (size_t at = 0; at < s.size();) {
        const uint64_t j = get<uint64_t>(s, at), i = get<uint64_t>(s, at);
        cands[j - base].push_back(i);
      }
    }
    for (auto& [j, list] : cands) {
      std::sort(list.begin(), list.end());
      list.erase(std::unique(list.begin(), list.end()), list.end());
      candidate_pairs += static_cast<double>(list.size());
    }
  }
  world.all_reduce_sum(&candidate_pairs, 1);
}

// Pass 2: the shingle sets the pairs need, made where their documents are and sent where the
// pairs are checked.
std::unordered_map<uint64_t, std::vector<uint64_t>> ShardedCleaner::shingle_sets() {
  std::unordered_set<uint64_t> local_need;  // local indexes
  std::vector<std::string> requests(static_cast<size_t>(R));
  for (const auto& [j, list] : cands) {
    local_need.insert(j);
    for (const uint64_t i : list) {
      const int o = owner_of(i);
      if (o == me) {
        local_need.insert(i - base);
      } else {
        put(requests[static_cast<size_t>(o)], i);
      }
    }
  }
  std::vector<std::vector<uint64_t>> wanted_by(static_cast<size_t>(R));  // local indexes
  {
    const std::vector<std::string> got = exchange(world, std::move(requests));
    for (int r = 0; r < R; ++r) {
      std::unordered_set<uint64_t> seen;
      for (size_t at = 0; at < got[r].size();) {
        const uint64_t local = get<uint64_t>(got[r], at) - base;
        if (seen.insert(local).second) wanted_by[static_cast<size_t>(r)].push_back(local);
        local_need.insert(local);
      }
    }
  }
  std::unordered_map<uint64_t, std::vector<uint64_t>> sets;  // global ordinal -> shingle set
  if (clean.near_dedup) {
    uint64_t k = 0;
    read_local(
        files, io,
        [&](std::string_view, std::string_view text, bool, const DocumentOrigin&,
            std::string_view) {
          const uint64_t local = k++;
          if (!local_need.count(local)) return;
          std::string_view t = text;
          FilterResult r;
          if (p.kind[local] & kCleaned) {
            r = apply_filters(text, clean.filters);
            t = r.text;
          }
          sets.emplace(base + local, shingle_hashes(t, m.shingle, m.shingle_size));
        },
        [](std::string_view, const DocumentOrigin&, const std::string&) {});
    if (k != p.kind.size()) throw Error("the input changed between reads");
  }
  {
    std::vector<std::string> replies(static_cast<size_t>(R));
    for (int r = 0; r < R; ++r) {
      for (const uint64_t local : wanted_by[static_cast<size_t>(r)]) {
        const std::vector<uint64_t>& set = sets.at(base + local);
        std::string& s = replies[static_cast<size_t>(r)];
        put(s, base + local);
        put(s, static_cast<uint64_t>(set.size()));
        s.append(reinterpret_cast<const char*>(set.data()), set.size() * sizeof(uint64_t));
      }
    }
    for (const std::string& s : exchange(world, std::move(replies))) {
      for (size_t at = 0; at < s.size();) {
        const uint64_t ord = get<uint64_t>(s, at), n = get<uint64_t>(s, at);
        std::vector<uint64_t> set(n);
        if (at + n * sizeof(uint64_t) > s.size()) throw Error("sharded clean: a truncated set");
        std::memcpy(set.data(), s.data() + at, n * sizeof(uint64_t));
        at += n * sizeof(uint64_t);
        sets.emplace(ord, std::move(set));
      }
    }
  }
  return sets;
}

// Every pair at or above the threshold goes to rank 0, which decides in input order.
void ShardedCleaner::verify_pairs() {
  const auto sets = shingle_sets();
  std::vector<std::string> edges(static_cast<size_t>(R));
  for (const auto& [j, list] : cands) {
    for (const uint64_t i : list) {
      ++jaccard_checks;
      const double jac = set_jaccard(sets.at(base + j), sets.at(i));
      if (jac < m.threshold) continue;
      put(edges[0], base + j);
      put(edges[0], i);
      put(edges[0], jac);
    }
  }
  resolve(std::move(edges));
}

// Rank 0 takes the verified pairs in input order: a document is a near duplicate of its first
// earlier partner that is kept; each rank gets its decisions.
void ShardedCleaner::resolve(std::vector<std::string> edges) {
  {
    const std::vector<std::string> at0 = exchange(world, std::move(edges));
    std::vector<std::string> decisions(static_cast<size_t>(R));
    if (me == 0) {
      struct Edge {
        uint64_t j, i;
        double jac;
      };
      std::vector<Edge> all;
      for (const std::string& s : at0) {
        for (size_t at = 0; at < s.size();)
          all.push_back({get<uint64_t>(s, at), get<uint64_t>(s, at), get<double>(s, at)});
      }
      std::sort(all.begin(), all.end(), [](const Edge& a, const Edge& b) {
        return std::tie(a.j, a.i) < std::tie(b.j, b.i);
      });
      std::unordered_set<uint64_t> removed;
      for (size_t e = 0; e < all.size(); ++e) {
        if (removed.count(all[e].j) || removed.count(all[e].i)) continue;
        removed.insert(all[e].j);  // its first earlier partner that is kept
        std::string& s = decisions[static_cast<size_t>(owner_of(all[e].j))];
        put(s, all[e].j);
        put(s, all[e].i);
        put(s, all[e].jac);
      }
    }
    for (const std::string& s : exchange(world, std::move(decisions))) {
      for (size_t at = 0; at < s.size();) {
        const uint64_t j = get<uint64_t>(s, at), i = get<uint64_t>(s, at);
        near_of[j - base] = {i, get<double>(s, at)};
      }
    }
  }
}

// The ids of the originals this rank's duplicates name (--removed): from p.ids here, from
// their ranks otherwise.
std::map<uint64_t, std::string> ShardedCleaner::original_ids() {
  std::map<uint64_t, std::string> ids;
  std::vector<std::string> ask(static_cast<size_t>(R));
  auto want = [&](uint64_t ord) {
    if (owner_of(ord) == me) {
      ids[ord] = p.ids.at(ord - base);
    } else {
      put(ask[static_cast<size_t>(owner_of(ord))], ord);
    }
  };
  for (const auto& [local, orig] : exact_of) want(orig);
  for (const auto& [local, pair] : near_of) want(pair.first);
  const std::vector<std::string> asked = exchange(world, std::move(ask));
  std::vector<std::string> replies(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    for (size_t at = 0; at < asked[r].size();) {
      const uint64_t ord = get<uint64_t>(asked[r], at);
      const std::string& id = p.ids.at(ord - base);
      put(replies[static_cast<size_t>(r)], ord);
      put(replies[static_cast<size_t>(r)], static_cast<uint64_t>(id.size()));
      replies[static_cast<size_t>(r)] += id;
    }
  }
  for (const std::string& s : exchange(world, std::move(replies))) {
    for (size_t at = 0; at < s.size();) {
      const uint64_t ord = get<uint64_t>(s, at), n = get<uint64_t>(s, at);
      if (at + n > s.size()) throw Error("sharded clean: a truncated id");
      ids[ord] = s.substr(at, n);
      at += n;
    }
  }
  return ids;
}

// Rank 0: the ranks' parts of `path`, joined in rank order (atomically), then removed.
void ShardedCleaner::join_parts(const std::string& path) const {
  AtomicFileWriter w(path);
  for (int r = 0; r < R; ++r) {
    const std::string text = read_file(part_of(path, r));
    w.write(text.data(), text.size());
  }
  w.commit();
  for (int r = 0; r < R; ++r) fs::remove(part_of(path, r));
}

// Pass 3: this rank's part of the output, then rank 0 joins the parts in rank order; the
// statistics summed over ranks.
CleanStats ShardedCleaner::write_output() {
  const bool audit = !io.removed_path.empty();
  const std::map<uint64_t, std::string> dup_ids =
      audit ? original_ids() : std::map<uint64_t, std::string>{};
  CleanStats st;
  {
    AtomicFileWriter w(part_of(out, me));
    std::unique_ptr<AtomicFileWriter> rw;
    if (audit) rw = std::make_unique<AtomicFileWriter>(part_of(io.removed_path, me));
    std::string buf, rbuf;
    auto flush = [&](bool force) {
      if (force || buf.size() >= (1u << 20)) {
        w.write(buf.data(), buf.size());
        buf.clear();
      }
      if (rw && (force || rbuf.size() >= (1u << 20))) {
        rw->write(rbuf.data(), rbuf.size());
        rbuf.clear();
      }
    };
    uint64_t k = 0;
    read_local(
        files, io,
        [&](std::string_view raw, std::string_view text, bool jsonl, const DocumentOrigin& o,
            std::string_view id) {
          const uint64_t local = k++;
          const uint8_t kind = p.kind[local], what = kind & ~kCleaned;
          CleanDecision d;
          d.ordinal = base + local;
          FilterResult r;
          if (what < kRuleCount) {
            d.rule = rule_name(static_cast<Rule>(what));
            ++st.rule_docs[what];
            st.rule_bytes[what] += text.size();
          } else if (const auto e = exact_of.find(local); e != exact_of.end()) {
            d.rule = "exact_duplicate";
            d.duplicate_of = static_cast<int64_t>(e->second);
            d.similarity = 1;
            ++st.exact_dups;
            st.exact_dup_bytes += text.size();
          } else if (const auto n = near_of.find(local); n != near_of.end()) {
            d.rule = "near_duplicate";
            d.duplicate_of = static_cast<int64_t>(n->second.first);
            d.similarity = n->second.second;
            ++st.near_dups;
            st.near_dup_bytes += text.size();
          } else {
            d.kept = true;
            d.text = text;
            if (kind & kCleaned) {
              r = apply_filters(text, clean.filters);
              d.text = r.text;
              d.text_changed = true;
              st.boilerplate_lines_removed += static_cast<uint64_t>(r.lines_removed);
            }
            ++st.docs_kept;
            st.bytes_kept += d.text.size();
            append_kept_document(buf, raw, jsonl, d, io);
          }
          if (audit && !d.kept) {
            const std::string origin = origin_text(o);
            const std::string dup =
                d.duplicate_of >= 0 ? dup_ids.at(static_cast<uint64_t>(d.duplicate_of)) : "";
            append_removed_record(rbuf, raw, jsonl, std::string(id), origin, d, dup);
          }
          ++st.docs_in;
          st.bytes_in += text.size();
          flush(false);
        },
        [&](std::string_view raw, const DocumentOrigin& o, const std::string& error) {
          if (audit) append_bad_line_record(rbuf, origin_text(o), error, raw);
        });
    if (k != p.kind.size()) throw Error("the input changed between reads");
    flush(true);
    w.commit();
    if (rw) rw->commit();
  }
  world.barrier();
  if (me == 0) {
    join_parts(out);
    if (audit) join_parts(io.removed_path);
  }
  world.barrier();

  // The statistics, summed over ranks.
  std::vector<double> v = {double(st.docs_in),
                           double(st.bytes_in),
                           double(st.exact_dups),
                           double(st.exact_dup_bytes),
                           double(st.near_dups),
                           double(st.near_dup_bytes),
                           double(st.boilerplate_lines_removed),
                           double(st.docs_kept),
                           double(st.bytes_kept),
                           double(p.bad_lines),
                           double(jaccard_checks)};
  for (int k = 0; k < kRuleCount; ++k) {
    v.push_back(double(st.rule_docs[k]));
    v.push_back(double(st.rule_bytes[k]));
  }
  world.all_reduce_sum(v.data(), v.size());
  auto u = [&](size_t i) { return static_cast<uint64_t>(v[i]); };
  CleanStats s;
  s.docs_in = u(0), s.bytes_in = u(1), s.exact_dups = u(2), s.exact_dup_bytes = u(3);
  s.near_dups = u(4), s.near_dup_bytes = u(5), s.boilerplate_lines_removed = u(6);
  s.docs_kept = u(7), s.bytes_kept = u(8), s.bad_lines_skipped = u(9), s.jaccard_checks = u(10);
  for (int k = 0; k < kRuleCount; ++k) {
    s.rule_docs[k] = u(11 + 2 * k);
    s.rule_bytes[k] = u(12 + 2 * k);
  }
  s.candidate_pairs = static_cast<uint64_t>(candidate_pairs);
  if (clean.near_dedup) {
    s.lsh = lsh.params();
    s.num_perm = np;
  }
  s.peak_rss_bytes = peak_rss_bytes();
  return s;
}

}  // namespace

CleanStats clean_sharded(const std::vector<fs::path>& inputs, const std::string& out,
                         const CleanOptions& clean, const CleanIoOptions& io, Communicator& world) {
  ShardedCleaner sc(inputs, out, clean, io, world);
  sc.sign();
  sc.exact_copies();
  sc.near_candidates();
  sc.verify_pairs();
  return sc.write_output();
}

}  // namespace ft::data_cli

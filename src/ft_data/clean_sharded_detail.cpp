// clean_sharded_detail.cpp: the byte exchange between ranks, the rank's slice of the input
// files and its first read (filters, hashes, band hashes, 8-bit signatures).
#include "clean_sharded_detail.h"

#include <omp.h>

namespace ft::data_cli::shard {

namespace fs = std::filesystem;
using trainer::Communicator;
using namespace trainer::data;

// Every rank walks the pairs (a < b) in the same order, a sending first: no pair waits on a later
// one.
std::vector<std::string> exchange(Communicator& c, std::vector<std::string> out) {
  const int R = c.world_size(), me = c.rank();
  std::vector<double> mine(static_cast<size_t>(R)), sizes(static_cast<size_t>(R) * R);
  for (int p = 0; p < R; ++p) mine[static_cast<size_t>(p)] = static_cast<double>(out[p].size());
  c.all_gather(mine.data(), sizes.data(), static_cast<size_t>(R));
  std::vector<std::string> in(static_cast<size_t>(R));
  in[static_cast<size_t>(me)] = std::move(out[static_cast<size_t>(me)]);
  auto size_from = [&](int src) {
    return static_cast<size_t>(sizes[static_cast<size_t>(src) * R + me]);
  };
  for (int a = 0; a < R; ++a) {
    for (int b = a + 1; b < R; ++b) {
      if (me != a && me != b) continue;
      const int peer = me == a ? b : a;
      std::string& got = in[static_cast<size_t>(peer)];
      got.resize(size_from(peer));
      const std::string& send = out[static_cast<size_t>(peer)];
      if (me == a) {
        if (!send.empty()) c.send_bytes(send.data(), send.size(), peer, 71);
        if (!got.empty()) c.recv_bytes(got.data(), got.size(), peer, 71);
      } else {
        if (!got.empty()) c.recv_bytes(got.data(), got.size(), peer, 71);
        if (!send.empty()) c.send_bytes(send.data(), send.size(), peer, 71);
      }
    }
  }
  return in;
}

std::vector<Slice> my_slices(const std::vector<fs::path>& inputs, int me, int R) {
  const std::vector<fs::path> files = list_document_files(inputs);
  std::vector<uint64_t> cum(files.size() + 1, 0);
  for (size_t i = 0; i < files.size(); ++i) {
    std::error_code ec;
    const uint64_t n = fs::file_size(files[i], ec);
    cum[i + 1] = cum[i] + (ec ? 0 : n);
  }
  const uint64_t total = cum.back();
  const uint64_t lo = total * static_cast<uint64_t>(me) / static_cast<uint64_t>(R);
  const uint64_t hi =
      me + 1 == R ? UINT64_MAX : total * static_cast<uint64_t>(me + 1) / static_cast<uint64_t>(R);
  std::vector<Slice> out;
  for (size_t i = 0; i < files.size(); ++i) {
    const uint64_t c0 = cum[i], c1 = cum[i + 1];
    const std::string name = files[i].filename().string();
    if (name.size() > 3 && name.compare(name.size() - 3, 3, ".gz") == 0) {
      // Compressed offsets are not document offsets: the whole file, to the rank it starts in.
      if (c0 >= lo && c0 < hi) out.push_back({files[i], 0, UINT64_MAX});
      continue;
    }
    const uint64_t a = std::max(lo, c0), b = std::min(hi, c1);
    if (a < b) out.push_back({files[i], a - c0, c1 <= hi ? UINT64_MAX : b - c0});
  }
  return out;
}

Pass1 sign_local(const std::vector<Slice>& files, const CleanOptions& clean,
                 const CleanIoOptions& io, const NearDupIndex& lsh, const MinHasher& hasher) {
  Pass1 p;
  const int np = hasher.num_perm(), nb = lsh.params().bands;
  std::vector<std::string> batch, batch_ids;
  auto flush = [&] {
    const int64_t n = static_cast<int64_t>(batch.size());
    std::vector<FilterResult> r(batch.size());
    std::vector<uint32_t> sigs(batch.size() * static_cast<size_t>(np));
#pragma omp parallel for schedule(dynamic, 8)
    for (int64_t i = 0; i < n; ++i) {
      r[i] = apply_filters(batch[i], clean.filters);
      if (!r[i].rejected) hasher.signature(r[i].text, sigs.data() + i * np);
    }
    for (int64_t i = 0; i < n; ++i) {
      if (!batch_ids.empty()) {
        p.ids.push_back(r[i].rejected ? std::string() : std::move(batch_ids[i]));
      }
      if (r[i].rejected) {
        p.kind.push_back(static_cast<uint8_t>(*r[i].rejected));
        continue;
      }
      const bool changed = r[i].lines_removed > 0 || r[i].text.size() != batch[i].size();
      p.kind.push_back(static_cast<uint8_t>(kPassed | (changed ? kCleaned : 0)));
      p.passed.push_back(p.kind.size() - 1);
      p.hashes.push_back(content_hash(r[i].text));
      const uint32_t* sig = sigs.data() + i * np;
      for (int b = 0; b < nb; ++b) p.keys.push_back(lsh.band_key(sig, b));
      for (int k = 0; k < np; ++k) p.sig8.push_back(static_cast<uint8_t>(sig[k]));
    }
    batch.clear();
    batch_ids.clear();
  };
  read_local(
      files, io,
      [&](std::string_view, std::string_view text, bool, const DocumentOrigin&,
          std::string_view id) {
        batch.emplace_back(text);
        if (!io.removed_path.empty()) batch_ids.emplace_back(id);
        if (batch.size() >= clean.batch_docs) flush();
      },
      [&](std::string_view, const DocumentOrigin&, const std::string&) { ++p.bad_lines; });
  flush();
  return p;
}

}  // namespace ft::data_cli::shard

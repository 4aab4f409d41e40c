// hta_counters.cpp: HTA's queue length, memory bandwidth (TraceCounters) and kernel table.
#include "hta_counters.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <unordered_map>

namespace ft::profiler::kineto {

using nlohmann::json;

namespace {

// numpy 1.24's argsort(kind="quicksort") (introsort: median-of-3 quicksort, insertion sort
// below 16 elements, heapsort past 2*log2(n) depth). pandas' sort_values uses it, and HTA's
// queue length depends on the order it leaves equal timestamps in, so it is reproduced here.

// Sifts a[i] down the max-heap a[1..n] of indices into v (numpy's aheapsort inner loop).
void sift_down(const std::vector<int64_t>& v, int64_t* a, int64_t i, int64_t n) {
  const int64_t tmp = a[i];
  int64_t j = i << 1;
  while (j <= n) {
    if (j < n && v[a[j]] < v[a[j + 1]]) ++j;
    if (!(v[tmp] < v[a[j]])) break;
    a[i] = a[j];
    i = j;
    j += j;
  }
  a[i] = tmp;
}

void numpy_aheapsort(const std::vector<int64_t>& v, int64_t* tosort, int64_t n) {
  int64_t* a = tosort - 1;  // 1-based indexing, as in numpy
  for (int64_t l = n >> 1; l > 0; --l) sift_down(v, a, l, n);
  for (; n > 1; --n) {
    std::swap(a[1], a[n]);
    sift_down(v, a, 1, n - 1);
  }
}

}  // namespace

std::vector<int64_t> numpy_argsort_quicksort(const std::vector<int64_t>& v) {
  const int64_t num = static_cast<int64_t>(v.size());
  std::vector<int64_t> idx(v.size());
  for (int64_t i = 0; i < num; ++i) idx[static_cast<size_t>(i)] = i;
  if (num < 2) return idx;
  constexpr int64_t kSmall = 15;
  int64_t* pl = idx.data();
  int64_t* pr = idx.data() + num - 1;
  std::vector<int64_t*> stack;
  std::vector<int> depth_stack;
  int cdepth = 0;
  for (uint64_t u = static_cast<uint64_t>(num); u >>= 1;) ++cdepth;
  cdepth *= 2;
  for (;;) {
    if (cdepth < 0) {
      numpy_aheapsort(v, pl, pr - pl + 1);
    } else {
      while ((pr - pl) > kSmall) {
        int64_t* pm = pl + ((pr - pl) >> 1);
        if (v[*pm] < v[*pl]) std::swap(*pm, *pl);
        if (v[*pr] < v[*pm]) std::swap(*pr, *pm);
        if (v[*pm] < v[*pl]) std::swap(*pm, *pl);
        const int64_t vp = v[*pm];
        int64_t* pi = pl;
        int64_t* pj = pr - 1;
        std::swap(*pm, *pj);
        for (;;) {
          do ++pi;
          while (v[*pi] < vp);
          do --pj;
          while (vp < v[*pj]);
          if (pi >= pj) break;
          std::swap(*pi, *pj);
        }
        int64_t* pk = pr - 1;
        std::swap(*pi, *pk);
        if (pi - pl < pr - pi) {
          stack.push_back(pi + 1);
          stack.push_back(pr);
          pr = pi - 1;
        } else {
          stack.push_back(pl);
          stack.push_back(pi - 1);
          pl = pi + 1;
        }
        depth_stack.push_back(--cdepth);
      }
      for (int64_t* pi = pl + 1; pi <= pr; ++pi) {
        const int64_t vi = *pi;
        const int64_t vp = v[vi];
        int64_t* pj = pi;
        int64_t* pk = pi - 1;
        while (pj > pl && vp < v[*pk]) *pj-- = *pk--;
        *pj = vi;
      }
    }
    if (stack.empty()) break;
    pr = stack.back();
    stack.pop_back();
    pl = stack.back();
    stack.pop_back();
    cdepth = depth_stack.back();
    depth_stack.pop_back();
  }
  return idx;
}

namespace {

// pandas' describe() of `v` (count, mean, sample std, min, quartiles, max) as a json object.
json describe_doubles(std::vector<double> v) {
  json st;
  st["count"] = static_cast<double>(v.size());
  double mean = 0;
  for (const double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double var = 0;
  for (const double x : v) var += (x - mean) * (x - mean);
  std::sort(v.begin(), v.end());
  auto q = [&](double p) {
    const double pos = p * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  st["mean"] = mean;
  st["std"] =
      v.size() > 1 ? json(std::sqrt(var / static_cast<double>(v.size() - 1))) : json(nullptr);
  st["min"] = v.front();
  st["25%"] = q(0.25);
  st["50%"] = q(0.5);
  st["75%"] = q(0.75);
  st["max"] = v.back();
  return st;
}

std::string memory_kind(const std::string& n) {
  if (n.compare(0, 6, "Memset") == 0) return "Memset";
  if (n.compare(0, 6, "Memcpy") != 0) return "Memcpy Unknown";
  return n.substr(0, 11);  // "Memcpy DtoH"
}

json nan_or(double v) { return std::isnan(v) ? json(nullptr) : json(v); }

}  // namespace

void queue_length_analyses(const HtaFrame& f, const std::vector<uint8_t>& kinds,
                           int64_t max_queue_length, json* summary, json* series, json* blocked) {
  const CorrIndex gpu(f.rows, /*gpu=*/true);
  // HTA concatenates the launch calls that have a GPU partner (taking the partner's stream)
  // and the GPU events launched by them, sorts by ts, groups by stream and takes a cumsum.
  std::vector<int64_t> ts, stream;
  std::vector<int> delta;
  std::vector<uint64_t> launched;
  for (const HtaRow& r : f.rows) {
    if (r.gpu() || r.corr == 0 || !(kinds[r.name] & 1)) continue;
    const auto it = gpu.find(r.corr);
    if (it.first == it.second) continue;
    ts.push_back(r.ts);
    stream.push_back(f.rows[it.first->row].stream);
    delta.push_back(1);
    launched.push_back(r.corr);
  }
  std::sort(launched.begin(), launched.end());
  for (const HtaRow& r : f.rows) {
    if (r.gpu() && r.corr != 0 && std::binary_search(launched.begin(), launched.end(), r.corr)) {
      ts.push_back(r.ts);
      stream.push_back(r.stream);
      delta.push_back(-1);
    }
  }
  struct Point {
    int64_t ts, q;
  };
  std::map<int64_t, std::vector<Point>> by_stream;
  std::map<int64_t, int64_t> run;
  for (const int64_t i : numpy_argsort_quicksort(ts)) {
    const auto k = static_cast<size_t>(i);
    by_stream[stream[k]].push_back({ts[k], run[stream[k]] += delta[k]});
  }
  json cols = {{"ts", json::array()}, {"stream", json::array()}, {"queue_length", json::array()}};
  for (const auto& [s, pts] : by_stream) {
    std::vector<double> q;
    q.reserve(pts.size());
    int64_t at_max = 0;
    bool full = false;
    for (size_t i = 0; i < pts.size(); ++i) {
      q.push_back(static_cast<double>(pts[i].q));
      if (series) {
        cols["ts"].push_back(pts[i].ts);
        cols["stream"].push_back(s);
        cols["queue_length"].push_back(pts[i].q);
      }
      // The time to the stream's next point (none after the last: pandas' NaN, skipped).
      if (pts[i].q >= max_queue_length) {
        full = true;
        if (i + 1 < pts.size()) at_max += pts[i + 1].ts - pts[i].ts;
      }
    }
    (*summary)["rank" + std::to_string(f.rank) + "_stream" + std::to_string(s)] =
        describe_doubles(std::move(q));
    if (blocked && full) {
      const int64_t span = f.ts_max - f.ts_min;
      blocked->push_back({{"rank", f.rank},
                          {"stream", s},
                          {"duration_at_max_queue_length", at_max},
                          {"relative_duration_at_max_queue_length",
                           nan_or(static_cast<double>(at_max) / static_cast<double>(span))}});
    }
  }
  if (series && !by_stream.empty()) (*series)[std::to_string(f.rank)] = std::move(cols);
}

void memory_bw_analyses(const HtaFrame& f, const StringTable& names, json* series, json* summary) {
  // Start points (+bw at ts) of every copy, then end points (-bw at ts + dur, a 0 µs copy
  // counted as 1 µs), sorted by ts as pandas does, then a running sum per copy kind.
  const size_t n = f.mem_bw.size();
  if (n == 0) return;
  std::vector<int64_t> ts(2 * n);
  std::vector<double> bw(2 * n);
  std::vector<std::string> kind(n);
  for (size_t i = 0; i < n; ++i) {
    const HtaRow& r = f.rows[f.mem_bw[i].first];
    const int64_t dur = r.dur == 0 ? 1 : r.dur;
    ts[i] = r.ts;
    ts[n + i] = r.ts + dur;
    bw[i] = f.mem_bw[i].second;
    bw[n + i] = -f.mem_bw[i].second;
    kind[i] = memory_kind(names.at(r.name));
  }
  std::map<std::string, std::vector<std::pair<int64_t, double>>> by_kind;
  std::map<std::string, double> run;
  for (const int64_t i : numpy_argsort_quicksort(ts)) {
    const auto k = static_cast<size_t>(i);
    const std::string& name = kind[k % n];
    double& sum = run[name];
    by_kind[name].emplace_back(ts[k], sum += bw[k]);
  }
  json cols = {{"ts", json::array()}, {"name", json::array()}, {"memory_bw_gbps", json::array()}};
  for (const auto& [name, pts] : by_kind) {
    std::vector<double> positive;
    for (const auto& [t, v] : pts) {
      if (series) {
        cols["ts"].push_back(t);
        cols["name"].push_back(name);
        cols["memory_bw_gbps"].push_back(v);
      }
      if (v > 0) positive.push_back(v);
    }
    if (positive.empty()) continue;
    json row = describe_doubles(std::move(positive));
    row["rank"] = f.rank;
    row["name"] = name;
    summary->push_back(std::move(row));
  }
  if (series) (*series)[std::to_string(f.rank)] = std::move(cols);
}

std::vector<json> kernel_breakdown_rows(const HtaFrame& f, const StringTable& names,
                                        HtaKernelType type, const HtaOptions& o) {
  struct Agg {
    std::string name;
    std::vector<double> durs;
    double sum = 0;
  };
  std::map<std::string, Agg> by_name;  // pandas' groupby: sorted by name
  for (const HtaRow& r : f.rows) {
    if (!r.gpu() || r.type != type) continue;
    Agg& a = by_name[names.at(r.name)];
    a.durs.push_back(static_cast<double>(r.dur));
    a.sum += static_cast<double>(r.dur);
  }
  std::vector<Agg> aggs;
  for (auto& [n, a] : by_name) {
    a.name = n;
    aggs.push_back(std::move(a));
  }
  std::stable_sort(aggs.begin(), aggs.end(),
                   [](const Agg& a, const Agg& b) { return a.sum > b.sum; });
  // Past num_kernels, HTA groups kernels into "others" and re-aggregates the per-kernel sums:
  // each row's max/min/mean are then of the kernels' sums, not of their durations.
  if (aggs.size() > o.num_kernels) {
    std::vector<double> cum(aggs.size());
    double c = 0;
    for (size_t i = 0; i < aggs.size(); ++i) cum[i] = c += aggs[i].sum;
    const double pos = o.duration_ratio * static_cast<double>(cum.size() - 1);
    const auto lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, cum.size() - 1);
    const double q = cum[lo] + (cum[hi] - cum[lo]) * (pos - static_cast<double>(lo));
    std::map<std::string, Agg> regrouped;
    for (size_t i = 0; i < aggs.size(); ++i) {
      const std::string name = cum[i] > q || i >= o.num_kernels ? "others" : aggs[i].name;
      Agg& a = regrouped[name];
      a.durs.push_back(aggs[i].sum);
      a.sum += aggs[i].sum;
    }
    aggs.clear();
    for (auto& [n, a] : regrouped) {
      a.name = n;
      aggs.push_back(std::move(a));
    }
  }
  std::vector<json> rows;
  for (const Agg& a : aggs) {
    const double cnt = static_cast<double>(a.durs.size());
    const double mean = a.sum / cnt;
    double ss = 0;
    for (const double d : a.durs) ss += (d - mean) * (d - mean);
    const auto [mn, mx] = std::minmax_element(a.durs.begin(), a.durs.end());
    json row;
    row["name"] = a.name;
    row["sum (us)"] = a.sum;
    row["max (us)"] = *mx;
    row["min (us)"] = *mn;
    row["mean (us)"] = mean;
    row["stddev"] = a.durs.size() > 1 ? std::sqrt(ss / (cnt - 1)) : 0.0;
    row["kernel_type"] = hta_kernel_type_name(type);
    row["rank"] = f.rank;
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace ft::profiler::kineto

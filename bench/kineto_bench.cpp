// kineto_bench.cpp: Kineto trace reading and HTA-analysis speed (MB/s of JSON) and peak memory.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "ft/core/error.h"
#include "ft/profiler/hta.h"
#include "ft/profiler/kineto_reader.h"

namespace {

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// VmRSS / VmHWM from /proc/self/status, in MiB.
double status_mib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size())) / 1024.0;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: kineto_bench TRACE_FILE|TRACE_DIR [--read-only]\n");
    return 2;
  }
  const bool read_only = argc > 2 && std::string(argv[2]) == "--read-only";
  try {
    const double base_rss = status_mib("VmRSS");
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    auto ranks = ft::profiler::read_kineto_ranks(argv[1]);
    const auto t1 = std::chrono::steady_clock::now();
    const double c1 = cpu_seconds();
    const double rss_after_read = status_mib("VmRSS");
    double json_bytes = 0;
    size_t events = 0;
    for (const auto& t : ranks) {
      json_bytes += std::stod(t.metadata.at("json_bytes"));
      events += t.events.size();
    }
    double analyse_wall = 0, analyse_cpu = 0;
    if (!read_only) {
      const auto r = ft::profiler::hta_analyses(ranks);
      analyse_wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      analyse_cpu = cpu_seconds() - c1;
      if (r.at("ranks").empty()) std::fprintf(stderr, "no ranks analysed\n");
    }
    const double read_wall = std::chrono::duration<double>(t1 - t0).count();
    const double read_cpu = c1 - c0;
    const double mb = json_bytes / 1e6;
    const double peak = status_mib("VmHWM");
    std::printf(
        "json %.1f MB, %zu events kept (%zu B each), %zu rank(s)\n"
        "read: %.2f s wall, %.2f s cpu -> %.0f MB/s per core (cpu), %.0f MB/s wall\n"
        "hta analyses: %.2f s wall, %.2f s cpu\n"
        "total: %.2f s wall, %.2f s cpu -> %.0f MB/s per core\n"
        "rss: baseline %.1f MiB, after read %.1f MiB, peak %.1f MiB = %.1f%% of the JSON "
        "(peak above baseline %.1f%%)\n",
        mb, events, sizeof(ft::profiler::Event), ranks.size(), read_wall, read_cpu, mb / read_cpu,
        mb / read_wall, analyse_wall, analyse_cpu, read_wall + analyse_wall, read_cpu + analyse_cpu,
        mb / (read_cpu + analyse_cpu), base_rss, rss_after_read, peak,
        100.0 * peak * 1048576.0 / json_bytes, 100.0 * (peak - base_rss) * 1048576.0 / json_bytes);
    return 0;
  } catch (const ft::Error& e) {
    std::fprintf(stderr, "kineto_bench: %s\n", e.what());
    return 1;
  }
}

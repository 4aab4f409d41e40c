// kineto_bench.cpp: Kineto trace reading + HTA analyses (or + diagnosis): MB/s of JSON, peak RSS.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "ft/core/error.h"
#include "ft/profiler/findings.h"
#include "ft/profiler/hta.h"
#include "ft/profiler/kineto_reader.h"
#include "ft/profiler/load_trace.h"

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
  const std::string mode = argc > 2 ? argv[2] : "";
  if (argc < 2 || (argc > 2 && mode != "--read-only" && mode != "--diagnose")) {
    std::fprintf(stderr, "usage: kineto_bench TRACE_FILE|TRACE_DIR [--read-only | --diagnose]\n");
    return 2;
  }
  // Default: what ft-hta does (read without [memory] samples, then HTA's analyses).
  // --diagnose: what `ft-diagnose TRACE` does before its reports (read, prepare, diagnose).
  const bool diagnose = mode == "--diagnose";
  try {
    const double base_rss = status_mib("VmRSS");
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    ft::profiler::KinetoReadOptions opt;
    opt.keep_memory = diagnose;
    auto ranks = ft::profiler::read_kineto_rank_records(argv[1], opt);
    const auto t1 = std::chrono::steady_clock::now();
    const double c1 = cpu_seconds();
    const double rss_after_read = status_mib("VmRSS");
    const size_t nranks = ranks.size();
    double json_bytes = 0;
    size_t events = 0;
    for (const auto& t : ranks) {
      json_bytes += std::stod(t.metadata.at("json_bytes"));
      events += t.size();
    }
    double analyse_wall = 0, analyse_cpu = 0;
    size_t classifier_events = 0;
    double prepared_rss = 0, prepared_hwm = 0;
    if (diagnose) {
      const ft::profiler::Trace t = ft::profiler::prepare_kineto_trace(std::move(ranks));
      classifier_events = t.events.size();
      prepared_rss = status_mib("VmRSS");
      prepared_hwm = status_mib("VmHWM");
      const ft::profiler::Diagnosis d = ft::profiler::diagnose(t);
      if (d.steps.empty()) std::fprintf(stderr, "no steps diagnosed\n");
    } else if (mode != "--read-only") {
      const auto r = ft::profiler::hta_analyses(std::move(ranks));
      if (r.at("ranks").empty()) std::fprintf(stderr, "no ranks analysed\n");
    }
    analyse_wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    analyse_cpu = cpu_seconds() - c1;
    const double read_wall = std::chrono::duration<double>(t1 - t0).count();
    const double read_cpu = c1 - c0;
    const double mb = json_bytes / 1e6;
    const double peak = status_mib("VmHWM");
    std::printf(
        "json %.1f MB, %zu events kept (%zu B records), %zu rank(s)\n"
        "read: %.2f s wall, %.2f s cpu -> %.0f MB/s per core (cpu), %.0f MB/s wall\n",
        mb, events, sizeof(ft::profiler::KinetoRecord), nranks, read_wall, read_cpu, mb / read_cpu,
        mb / read_wall);
    if (diagnose) {
      std::printf(
          "prepare + diagnose: %.2f s wall, %.2f s cpu (%zu classifier events of %zu B; "
          "after prepare: rss %.1f MiB, peak %.1f MiB)\n",
          analyse_wall, analyse_cpu, classifier_events, sizeof(ft::profiler::Event), prepared_rss,
          prepared_hwm);
    } else {
      std::printf("hta analyses: %.2f s wall, %.2f s cpu\n", analyse_wall, analyse_cpu);
    }
    std::printf(
        "total: %.2f s wall, %.2f s cpu -> %.0f MB/s per core\n"
        "rss: baseline %.1f MiB, after read %.1f MiB, peak %.1f MiB = %.1f%% of the JSON "
        "(peak above baseline %.1f%%)\n",
        read_wall + analyse_wall, read_cpu + analyse_cpu, mb / (read_cpu + analyse_cpu), base_rss,
        rss_after_read, peak, 100.0 * peak * 1048576.0 / json_bytes,
        100.0 * (peak - base_rss) * 1048576.0 / json_bytes);
    return 0;
  } catch (const ft::Error& e) {
    std::fprintf(stderr, "kineto_bench: %s\n", e.what());
    return 1;
  }
}

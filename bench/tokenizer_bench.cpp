// tokenizer_bench.cpp: single-thread GPT-2 BPE and byte tokenizer throughput (MB/s, tokens/s) on
// the KJV.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/trainer/data.h"
#include "ft/trainer/tokenizer_gpt2.h"

namespace data = ft::trainer::data;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU time of the calling thread: on a shared, overloaded machine this counts only the time
// the thread actually ran, so it moves far less with the load than wall time does.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Pass {
  double s;
  size_t tokens;
};

}  // namespace

// Usage: tokenizer_bench [--reps N] [--text FILE] [--dump-ids FILE.u32]
// Default text: the KJV (data::kjv_text_path()). --dump-ids writes the GPT-2 ids as raw uint32
// (little-endian) for comparison with another implementation (docs/benchmarks.md).
// One JSON object on stdout. Runs on the calling thread only.
int main(int argc, char** argv) {
  int reps = 5;
  std::string text_path, dump_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--text" && i + 1 < argc) {
      text_path = argv[++i];
    } else if (a == "--dump-ids" && i + 1 < argc) {
      dump_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: tokenizer_bench [--reps N] [--text FILE] [--dump-ids FILE]\n");
      return 2;
    }
  }
  try {
    if (text_path.empty()) text_path = data::kjv_text_path().string();
    const std::string text = ft::read_file(text_path);
    const std::string dir = std::string(FT_SOURCE_DIR) + "/tests/data/gpt2/";
    auto t0 = std::chrono::steady_clock::now();
    auto gpt2 = data::Gpt2Tokenizer::from_files(dir + "encoder.json.gz", dir + "vocab.bpe.gz");
    const double load_s = seconds_since(t0);

    // Cold: a fresh tokenizer (empty piece cache) encodes the text once; warm: the cache holds
    // every piece of the text, so BPE runs only in the cold pass.
    t0 = std::chrono::steady_clock::now();
    double c0 = thread_cpu_s();
    std::vector<int32_t> ids = gpt2->encode(text);
    const double cold_cpu = thread_cpu_s() - c0;
    const Pass cold{seconds_since(t0), ids.size()};
    std::vector<double> warm, warm_cpu;
    for (int r = 0; r < reps; ++r) {
      t0 = std::chrono::steady_clock::now();
      const double c0 = thread_cpu_s();
      ids = gpt2->encode(text);
      warm_cpu.push_back(thread_cpu_s() - c0);
      warm.push_back(seconds_since(t0));
    }
    std::sort(warm.begin(), warm.end());
    std::sort(warm_cpu.begin(), warm_cpu.end());
    t0 = std::chrono::steady_clock::now();
    const std::string back = gpt2->decode(ids.data(), ids.size());
    const double decode_s = seconds_since(t0);
    if (back != text) {
      std::fprintf(stderr, "tokenizer_bench: decode(encode(text)) != text\n");
      return 1;
    }
    if (!dump_path.empty()) {
      std::vector<uint32_t> u(ids.begin(), ids.end());
      ft::write_file_atomic(dump_path, std::string_view(reinterpret_cast<const char*>(u.data()),
                                                        u.size() * sizeof(uint32_t)));
    }
    // One 1 MB piece (letters, no space): the heap-based merge keeps this O(n log n).
    std::string run(1 << 20, 'a');
    uint32_t lcg = 12345;
    for (char& ch : run) {
      lcg = lcg * 1103515245u + 12345u;
      ch = "etaoinshrdlucmfw"[(lcg >> 16) % 16];
    }
    t0 = std::chrono::steady_clock::now();
    const size_t run_tokens = gpt2->encode(run).size();
    const double run_s = seconds_since(t0);
    data::ByteTokenizer byte;
    std::vector<double> byte_s;
    for (int r = 0; r < reps; ++r) {
      t0 = std::chrono::steady_clock::now();
      const auto b = byte.encode(text);
      byte_s.push_back(seconds_since(t0));
      if (b.size() != text.size()) return 1;
    }
    std::sort(byte_s.begin(), byte_s.end());
    const double mb = static_cast<double>(text.size()) / 1e6;
    const double warm_med = warm[warm.size() / 2];
    std::printf(
        "{\"text\": \"%s\", \"bytes\": %zu, \"gpt2_tokens\": %zu, \"bytes_per_token\": %.3f,\n"
        " \"load_s\": %.3f,\n"
        " \"gpt2_cold\": {\"s\": %.3f, \"mb_per_s\": %.2f, \"tokens_per_s\": %.0f},\n"
        " \"gpt2_warm_median\": {\"s\": %.3f, \"mb_per_s\": %.2f, \"tokens_per_s\": %.0f},\n"
        " \"gpt2_warm_best\": {\"s\": %.3f, \"mb_per_s\": %.2f},\n"
        " \"gpt2_cpu_time\": {\"cold_mb_per_s\": %.2f, \"warm_median_mb_per_s\": %.2f, "
        "\"warm_median_tokens_per_s\": %.0f},\n"
        " \"gpt2_decode\": {\"s\": %.3f, \"mb_per_s\": %.2f},\n"
        " \"gpt2_one_1mb_piece\": {\"s\": %.3f, \"tokens\": %zu},\n"
        " \"byte_encode_median\": {\"s\": %.4f, \"mb_per_s\": %.1f}, \"reps\": %d}\n",
        text_path.c_str(), text.size(), ids.size(),
        static_cast<double>(text.size()) / static_cast<double>(ids.size()), load_s, cold.s,
        mb / cold.s, static_cast<double>(cold.tokens) / cold.s, warm_med, mb / warm_med,
        static_cast<double>(ids.size()) / warm_med, warm[0], mb / warm[0], mb / cold_cpu,
        mb / warm_cpu[warm_cpu.size() / 2],
        static_cast<double>(ids.size()) / warm_cpu[warm_cpu.size() / 2], decode_s, mb / decode_s,
        run_s, run_tokens, byte_s[byte_s.size() / 2], mb / byte_s[byte_s.size() / 2], reps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

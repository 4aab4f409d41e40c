// fuzz_regression_test.cpp: every file in tests/data/fuzz/ (seeds and crash reproducers found by
// tests/fuzz/kineto_reader_fuzz) goes through the fuzz target's body, fuzz_one_input, in the
// normal suite: bad input must end in a documented error, never in another exception, a failed
// fuzz check or (under FT_SANITIZE) a sanitizer report.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/fuzz_body.h"

namespace fs = std::filesystem;

namespace {

const fs::path kDir = fs::path(FT_SOURCE_DIR) / "tests" / "data" / "fuzz";

std::vector<fs::path> inputs() {
  std::vector<fs::path> out;
  if (!fs::is_directory(kDir)) return out;
  for (const auto& e : fs::directory_iterator(kDir)) {
    if (e.is_regular_file() && e.path().filename() != "README.md") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void run(const std::string& bytes) {
  fuzz_one_input(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

TEST(FuzzRegression, EveryInputEndsCleanly) {
  const auto files = inputs();
  ASSERT_GE(files.size(), 5u) << "the fuzz inputs are missing at " << kDir;
  for (const fs::path& p : files) {
    SCOPED_TRACE(p.filename().string());
    const std::string bytes = read_bytes(p);
    EXPECT_NO_THROW(run(bytes));
  }
}

// The reader's options come from the input's size (its low 8 bits: flows, instants, memory,
// steps, 2 bits of buffer size, two ranks, the Trace reader). Each input padded with trailing
// spaces (the same JSON) to sizes with every bit on alone, every buffer size, all bits off and on.
TEST(FuzzRegression, EveryOption) {
  static constexpr size_t kLowBits[] = {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x20,
                                        0x30, 0x40, 0x80, 0x55, 0xAA, 0xFF};
  for (const fs::path& p : inputs()) {
    const std::string bytes = read_bytes(p);
    SCOPED_TRACE(p.filename().string());
    for (size_t low : kLowBits) {
      const size_t pad = (low + 256 - bytes.size() % 256) % 256;
      EXPECT_NO_THROW(run(bytes + std::string(pad, ' '))) << "size % 256 = " << low;
    }
  }
}

// The committed valid samples (Kineto traces, ft's trace, report.json goldens) go all the way
// through the analyses and writers.
TEST(FuzzRegression, CommittedSamples) {
  const fs::path data = fs::path(FT_SOURCE_DIR) / "tests" / "data";
  int n = 0;
  for (const char* sub : {"kineto", "golden"}) {
    for (const auto& e : fs::directory_iterator(data / sub)) {
      if (e.path().extension() != ".json") continue;
      SCOPED_TRACE(e.path().string());
      EXPECT_NO_THROW(run(read_bytes(e.path())));
      ++n;
    }
  }
  EXPECT_GE(n, 5);
}

// The empty input and a lone byte (the fuzzer's first inputs).
TEST(FuzzRegression, Degenerate) {
  EXPECT_NO_THROW(run(""));
  EXPECT_NO_THROW(run("{"));
  EXPECT_NO_THROW(run(std::string(1, '\0')));
}

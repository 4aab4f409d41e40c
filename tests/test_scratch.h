// test_scratch.h: scratch directories of a test program, removed when it exits after passing.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include <unistd.h>

namespace ft::test {

namespace detail {

// Removes the registered directories at normal process exit, unless a test failed (then they
// stay for inspection and are listed on stderr) or FT_KEEP_TEST_DIRS is set.
struct ScratchRegistry {
  std::mutex mu;
  std::vector<std::filesystem::path> dirs;
  ~ScratchRegistry() {
    const bool failed = !::testing::UnitTest::GetInstance()->Passed();
    if (failed || std::getenv("FT_KEEP_TEST_DIRS")) {
      for (const auto& d : dirs) std::fprintf(stderr, "test scratch kept: %s\n", d.c_str());
      return;
    }
    for (const auto& d : dirs) {
      std::error_code ec;  // best effort: a missing or busy directory is not an error
      std::filesystem::remove_all(d, ec);
    }
  }
};

inline ScratchRegistry& scratch_registry() {
  static ScratchRegistry registry;
  return registry;
}

}  // namespace detail

// Registers `dir` (which may not exist yet) for removal when the test program exits.
inline void remove_at_exit(const std::filesystem::path& dir) {
  auto& r = detail::scratch_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.dirs.push_back(dir);
}

// A fresh, empty directory `name`_<pid> under the system temp dir, removed at exit as above.
inline std::filesystem::path scratch_dir(const std::string& name) {
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  remove_at_exit(d);
  return d;
}

}  // namespace ft::test

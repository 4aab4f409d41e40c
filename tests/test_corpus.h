// test_corpus.h: a small deterministic word corpus for training tests (same text for a seed).
#pragma once

#include <filesystem>
#include <string>

#include "ft/core/atomic_file.h"
#include "ft/core/rng.h"

namespace ft::test {

// Writes dir/corpus.txt: `chapters` blank-line-separated chapters of 20 lines of 5-12 words from
// a 15-word Bible-like vocabulary (Rng seed 42), and returns its path. Creates dir if needed.
inline std::filesystem::path write_word_corpus(const std::filesystem::path& dir, int chapters) {
  const char* words[] = {"the", "lord",    "said",   "unto",  "moses", "and", "in",  "beginning",
                         "god", "created", "heaven", "earth", "light", "was", "good"};
  ft::Rng rng(42);
  std::string text;
  for (int chapter = 0; chapter < chapters; ++chapter) {
    for (int line = 0; line < 20; ++line) {
      const int n = 5 + static_cast<int>(rng.next_u64() % 8);
      for (int w = 0; w < n; ++w) {
        text += words[rng.next_u64() % 15];
        text += w + 1 < n ? ' ' : '.';
      }
      text += '\n';
    }
    text += '\n';
  }
  std::filesystem::create_directories(dir);
  const std::filesystem::path p = dir / "corpus.txt";
  ft::write_file_atomic(p, text);
  return p;
}

}  // namespace ft::test

// parallel_test.cpp: ft::parallel_for runs every index once and reports the lowest index's error.
#include "ft/core/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

TEST(ParallelFor, RunsEveryIndexOnce) {
  std::vector<std::atomic<int>> hits(1000);
  ft::parallel_for(
      hits.size(), [&](size_t i) { hits[i].fetch_add(1); }, 4);
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ParallelFor, EveryCallRunsAndTheLowestIndexErrorIsRethrown) {
  std::vector<std::atomic<int>> hits(64);
  try {
    ft::parallel_for(
        hits.size(),
        [&](size_t i) {
          hits[i].fetch_add(1);
          if (i == 40 || i == 7 || i == 63) throw std::runtime_error("job " + std::to_string(i));
        },
        3);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "job 7");
  }
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ParallelFor, NothingToDoAndOneThread) {
  int calls = 0;
  ft::parallel_for(0, [&](size_t) { ++calls; });
  EXPECT_EQ(calls, 0);
  ft::parallel_for(
      5, [&](size_t) { ++calls; }, 1);  // the calling thread alone: no race
  EXPECT_EQ(calls, 5);
}

// clock_offset_mpi_test.cpp: the ping-pong clock-offset estimate between ranks (multi-rank traces).
// FT_TEST_RANKS 3
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "ft/app/training_profile.h"
#include "ft/trainer/communicator.h"

namespace ft::app {
namespace {

// Every rank of this test runs on one host, so the true offset is 0: the estimate must lie
// within its own error bound of 0 (plus 50 us for the clock reads around the messages).
TEST(ClockOffset, OneHostEstimateIsZeroWithinItsBound) {
  auto world = trainer::make_world_communicator(30.0);
  ASSERT_EQ(world->world_size(), 3);
  const ClockOffset c = estimate_clock_offset(*world, 8);
  EXPECT_TRUE(c.measured);
  EXPECT_EQ(c.rounds, 8);
  if (world->rank() == 0) {
    EXPECT_EQ(c.offset_ns, 0);
    EXPECT_EQ(c.error_ns, 0);
  } else {
    EXPECT_GT(c.error_ns, 0);
    EXPECT_LE(std::llabs(c.offset_ns), c.error_ns + 50'000)
        << "offset " << c.offset_ns << " ns, bound " << c.error_ns << " ns";
  }
  std::printf("rank %d: clock offset %lld ns, within +-%lld ns\n", world->rank(),
              static_cast<long long>(c.offset_ns), static_cast<long long>(c.error_ns));
  // One rank: nothing to measure.
  auto alone = trainer::make_local_communicator();
  EXPECT_FALSE(estimate_clock_offset(*alone).measured);
}

}  // namespace
}  // namespace ft::app

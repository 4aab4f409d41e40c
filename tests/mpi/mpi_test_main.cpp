// mpi_test_main.cpp: GoogleTest main for tests run under mpirun: one report (rank 0), one verdict.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "ft/trainer/communicator.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  if (r && std::string(r) != "0" && !std::getenv("FT_TEST_ALL_RANKS")) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  // A failure on any rank fails the job; the peers are not left waiting.
  if (rc != 0 && ft::trainer::launched_by_mpi()) ft::trainer::abort_job(rc);
  ft::trainer::finalize_comm();
  return rc;
}

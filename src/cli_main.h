// cli_main.h: the shared main() of ft's commands: OpenMP binding and error-to-exit-status mapping.
#pragma once

#include <fmt/format.h>

#include <cstdlib>
#include <exception>

#include "ft/core/error.h"

namespace ft {

// Exit statuses of ft's commands.
inline constexpr int kExitOk = 0, kExitError = 1, kExitConfig = 2, kExitOom = 3;

// Runs `body` (returning the exit status) after pinning OpenMP threads to cores unless the user
// chose otherwise (measured 5-10% faster on the 2-core benchmark machine, docs/benchmarks.md; must
// precede the first OpenMP call; launchers that bind processes, e.g. mpirun, should set these).
// Errors become a one-line message prefixed with `program` and exit status 2 (ConfigError),
// 3 (OutOfMemoryError) or 1 (anything else).
template <typename Body>
int run_command_line(const char* program, Body&& body) {
  // Under an MPI launcher the launcher decides placement: with --oversubscribe it binds
  // nothing, and "close" would then stack every rank's threads on the first core.
  if (!std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("PMIX_RANK")) {
    setenv("OMP_PROC_BIND", "close", /*overwrite=*/0);
    setenv("OMP_PLACES", "cores", /*overwrite=*/0);
  }
  try {
    return body();
  } catch (const ConfigError& e) {
    fmt::print(stderr, "{}: error: {}\n", program, e.what());
    return kExitConfig;
  } catch (const OutOfMemoryError& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return kExitOom;
  } catch (const Error& e) {
    fmt::print(stderr, "{}: error: {}\n", program, e.what());
    return kExitError;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: internal error: {}\n", program, e.what());
    return kExitError;
  }
}

}  // namespace ft

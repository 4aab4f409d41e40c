// cli_main.h: the shared main() of ft's commands: error-to-exit-status mapping.
#pragma once

#include <fmt/format.h>

#include <exception>

#include "ft/core/error.h"

namespace ft {

// Exit statuses of ft's commands.
inline constexpr int kExitOk = 0, kExitError = 1, kExitConfig = 2, kExitOom = 3;

// Runs `body` (returning the exit status). Errors become a one-line message prefixed with
// `program` and exit status 2 (ConfigError), 3 (OutOfMemoryError) or 1 (anything else).
// OpenMP's placement is left to the user: libgomp reads OMP_PROC_BIND / OMP_PLACES when it
// loads, before main, so setting them here bound only the processes this one started (an
// oversubscribed run's mpirun ranks, all to core 0; docs/notes.md).
template <typename Body>
int run_command_line(const char* program, Body&& body) {
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

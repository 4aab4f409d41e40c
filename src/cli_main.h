// cli_main.h: what ft's commands share: error-to-exit-status mapping, finding sibling tools.
#pragma once

#include <fmt/format.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <system_error>

#include "ft/core/error.h"

namespace ft {

// Exit statuses of ft's commands.
inline constexpr int kExitOk = 0, kExitError = 1, kExitConfig = 2, kExitOom = 3;

// Another of ft's tools: the path in environment variable `env` when set, else `name` in this
// executable's directory.
inline std::filesystem::path sibling_tool(const char* env, const char* name) {
  if (const char* e = std::getenv(env); e && *e) return e;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (ec ? std::filesystem::current_path() : self.parent_path()) / name;
}

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

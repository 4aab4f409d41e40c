// run_cli.h: runs one of ft's built command-line tools for end-to-end tests (output and exit
// status).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace ft::testing {

struct CliResult {
  int status;       // exit status, -1 when killed by a signal
  std::string out;  // stdout and stderr together
};

// Runs `<command> 2>&1` through the shell.
inline CliResult run_shell(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  CliResult r{0, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed: " + cmd};
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// Runs `${FT_BINARY_DIR}/<tool> <args> 2>&1` through the shell.
inline CliResult run_cli(const std::string& tool, const std::string& args) {
  return run_shell(std::string(FT_BINARY_DIR) + "/" + tool + " " + args);
}

}  // namespace ft::testing

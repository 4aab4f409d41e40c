// main.cpp: the ft-data command: data preparation (tokenize, clean, stats) for ft-train.
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "commands.h"
#include "ft/core/error.h"
#include "ft/trainer/communicator.h"

namespace {

constexpr const char* kUsage =
    "usage: ft-data <command> [options]\n"
    "commands:\n"
    "  tokenize IN... --out DIR --tokenizer byte|gpt2 [--vocab FILE --merges FILE]\n"
    "                 write llm.c token shards (mmapped by ft-train --data DIR)\n"
    "  clean IN... --out OUT [--near-dup-threshold J] [--stats FILE.json]\n"
    "                 exact and near-duplicate removal plus noise filters (under mpirun:\n"
    "                 sharded across the ranks, the same output)\n"
    "  stats IN...    documents, bytes, tokens and quality signals of a data set\n"
    "run 'ft-data <command> --help' for a command's options\n";

// Under mpirun a failing rank ends the job (its peers would wait in a collective otherwise).
int fail(int code) {
  if (ft::trainer::launched_by_mpi()) {
    std::fflush(stderr);
    ft::trainer::abort_job(code);
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (command == "tokenize") return ft::data_cli::tokenize_main(args);
    if (command == "clean") return ft::data_cli::clean_main(args);
    if (command == "stats") return ft::data_cli::stats_main(args);
    fmt::print(stderr, "ft-data: unknown command '{}'\n{}", command, kUsage);
    return 2;
  } catch (const ft::ConfigError& e) {
    fmt::print(stderr, "ft-data {}: {}\n", command, e.what());
    return fail(2);
  } catch (const std::exception& e) {
    fmt::print(stderr, "ft-data {}: error: {}\n", command, e.what());
    return fail(1);
  }
}

// commands.h: the subcommands of ft-data, one source file each, dispatched by main.cpp.
#pragma once

#include <string>
#include <vector>

namespace ft::data_cli {

// Each takes the arguments after the subcommand name and returns the process exit status.
// They throw ft::ConfigError for bad arguments (main prints it and exits 2) and other
// ft::Error subclasses for bad input (exit 1).
int tokenize_main(const std::vector<std::string>& args);  // tokenize_cmd.cpp
int stats_main(const std::vector<std::string>& args);     // stats_cmd.cpp
int clean_main(const std::vector<std::string>& args);     // clean_cmd.cpp

}  // namespace ft::data_cli

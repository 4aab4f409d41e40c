// stats_cmd.cpp: 'ft-data stats' (not built yet: reports so and fails).
#include "commands.h"
#include "ft/core/error.h"

namespace ft::data_cli {

int stats_main(const std::vector<std::string>&) {
  throw ft::Error("'ft-data stats' is not implemented yet");
}

}  // namespace ft::data_cli

// clean_cmd.cpp: 'ft-data clean' (not built yet: reports so and fails).
#include "commands.h"
#include "ft/core/error.h"

namespace ft::data_cli {

int clean_main(const std::vector<std::string>&) {
  throw ft::Error("'ft-data clean' is not implemented yet");
}

}  // namespace ft::data_cli

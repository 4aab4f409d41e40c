// tokenize_cmd.cpp: 'ft-data tokenize' (not built yet: reports so and fails).
#include "commands.h"
#include "ft/core/error.h"

namespace ft::data_cli {

int tokenize_main(const std::vector<std::string>&) {
  throw ft::Error("'ft-data tokenize' is not implemented yet");
}

}  // namespace ft::data_cli

// launch.cpp: finding mpirun and building its command line.
#include "ft/trainer/launch.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace ft::trainer {

std::string find_mpirun() {
  const char* env = std::getenv("FT_MPIRUN");
  if (env && *env) return env;
  const char* path = std::getenv("PATH");
  if (!path) return "";
  const std::string all = path;
  size_t start = 0;
  for (;;) {
    const size_t colon = all.find(':', start);
    const size_t len = colon == std::string::npos ? all.size() - start : colon - start;
    // An empty PATH entry is the current directory.
    const std::string cand = (len ? all.substr(start, len) : std::string(".")) + "/mpirun";
    struct stat st {};
    if (stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(cand.c_str(), X_OK) == 0)
      return cand;
    if (colon == std::string::npos) return "";
    start = colon + 1;
  }
}

std::vector<std::string> mpirun_command(const std::string& mpirun, int ranks,
                                        const std::string& program,
                                        const std::vector<std::string>& args) {
  std::vector<std::string> cmd = {mpirun, "-np", std::to_string(ranks), "--oversubscribe", program};
  cmd.insert(cmd.end(), args.begin(), args.end());
  return cmd;
}

void allow_mpirun_as_root() {
  if (geteuid() != 0) return;
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", /*overwrite=*/0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", /*overwrite=*/0);
}

}  // namespace ft::trainer

// diff_cmd.h: `ft-diagnose diff A B`: compares two runs (ft run directories or traces, PyTorch
// traces or folders of ranks) and writes diff.{md,html,json}.
#pragma once

#include <string>
#include <vector>

namespace ft::diagnose {

// `args` are the words after "diff": A B [--out DIR] [--fail-if-slower PCT]. Prints the
// comparison; returns 0, or `gate_exit` when B's median step is slower than A's by more than PCT
// percent beyond the bootstrap interval. Throws ConfigError on bad arguments.
int run_diff(const std::vector<std::string>& args, int gate_exit);

}  // namespace ft::diagnose

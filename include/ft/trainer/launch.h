// launch.h: finding the MPI launcher for commands that start ft-train on several ranks.
#pragma once

#include <string>
#include <vector>

namespace ft::trainer {

// The launcher: $FT_MPIRUN when set, else `mpirun` on PATH; empty when there is neither.
std::string find_mpirun();

// `mpirun -np N --oversubscribe PROGRAM ARGS...` (oversubscribed: tests and small machines run
// more ranks than cores).
std::vector<std::string> mpirun_command(const std::string& mpirun, int ranks,
                                        const std::string& program,
                                        const std::vector<std::string>& args);

// OpenMPI refuses to run as root unless OMPI_ALLOW_RUN_AS_ROOT and _CONFIRM are set: sets both
// in this process (children inherit them) when it runs as root, leaving existing values alone.
void allow_mpirun_as_root();

}  // namespace ft::trainer

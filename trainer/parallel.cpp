// parallel.cpp: validation of the DP x TP x PP layout and the split into process groups.
#include "ft/trainer/parallel.h"

#include <fmt/format.h>

#include "ft/core/error.h"

namespace ft::trainer {

void ParallelConfig::validate() const {
  if (dp < 1 || tp < 1 || pp < 1) {
    throw ConfigError(fmt::format("--dp {} --tp {} --pp {}: every degree must be >= 1", dp, tp, pp));
  }
  if (zero < 0 || zero > 3) {
    throw ConfigError(fmt::format("--zero {}: expected 0, 1, 2 or 3", zero));
  }
  if (!(bucket_mb > 0)) throw ConfigError("--bucket-mb must be > 0");
  if (straggle_work < 0) throw ConfigError("--straggle-work must be >= 0");
}

ParallelGroups ParallelGroups::make(std::unique_ptr<Communicator> world, const ParallelConfig& cfg) {
  cfg.validate();
  const int n = world->world_size();
  if (n != cfg.size()) {
    throw ConfigError(fmt::format(
        "--dp {} x --tp {} x --pp {} = {} processes, but the job has {} (mpirun -np {})", cfg.dp,
        cfg.tp, cfg.pp, cfg.size(), n, n));
  }
  ParallelGroups g;
  const int r = world->rank();
  g.tp_rank = r % cfg.tp;
  g.dp_rank = (r / cfg.tp) % cfg.dp;
  g.pp_stage = r / (cfg.tp * cfg.dp);
  g.dp = world->split(g.pp_stage * cfg.tp + g.tp_rank, g.dp_rank, CommGroup::kDp);
  g.tp = world->split(g.pp_stage * cfg.dp + g.dp_rank, g.tp_rank, CommGroup::kTp);
  g.pp = world->split(g.dp_rank * cfg.tp + g.tp_rank, g.pp_stage, CommGroup::kPp);
  g.world = std::move(world);
  return g;
}

std::string ParallelGroups::describe() const {
  return fmt::format("world rank {}/{}: dp rank {}/{}, tp rank {}/{}, pp stage {}/{}",
                     world->rank(), world->world_size(), dp_rank, dp->world_size(), tp_rank,
                     tp->world_size(), pp_stage, pp->world_size());
}

std::string rank_path(const std::string& path, int rank) {
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  const std::string tag = fmt::format(".rank{}", rank);
  return has_ext ? path.substr(0, dot) + tag + path.substr(dot) : path + tag;
}

}  // namespace ft::trainer

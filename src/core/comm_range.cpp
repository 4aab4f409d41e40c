// comm_range.cpp: names of the process-group roles a comm range carries.
#include "ft/core/comm_range.h"

namespace ft {

const char* comm_group_name(CommGroup g) {
  switch (g) {
    case CommGroup::kWorld: return "world";
    case CommGroup::kDp: return "dp";
    case CommGroup::kTp: return "tp";
    case CommGroup::kPp: return "pp";
    case CommGroup::kOther: break;
  }
  return "other";
}

}  // namespace ft

// step_observer.cpp: the JSON form of one step's metrics (ft-train --metrics lines).
#include "ft/core/step_observer.h"

namespace ft {

nlohmann::json StepMetrics::to_json() const {
  nlohmann::json j = {{"step", step},
                      {"loss", loss},
                      {"lr", lr},
                      {"grad_norm", grad_norm},
                      {"step_ms", step_ms},
                      {"data_ms", data_ms},
                      {"data_wait_ms", data_wait_ms},
                      {"data_preprocess_ms", data_preprocess_ms},
                      {"comm_ms", comm_ms},
                      {"comm_exposed_share", comm_exposed_share()},
                      {"tokens_per_s", tokens_per_s},
                      {"mfu", mfu},
                      {"skipped", skipped},
                      {"loss_scale", loss_scale},
                      {"mem_allocated", mem_allocated},
                      {"mem_reserved", mem_reserved},
                      {"mem_peak", mem_peak}};
  if (pp_busy_ms > 0) {
    j["pp_busy_ms"] = pp_busy_ms;
    j["pp_wait_ms"] = pp_wait_ms;
  }
  return j;
}

}  // namespace ft

// trace_diff_test.cpp: HTA TraceDiff parity on trace_compare (compare_traces for CPU, GPU and
// ALL with short names; ops_diff on the CPU), HTA's shorten_name, and clear errors.
#include "ft/profiler/trace_diff.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "ft/core/error.h"

namespace {

using nlohmann::json;

const std::string kData = std::string(FT_SOURCE_DIR) + "/tests/data";

const json& reference() {
  static const json ref = [] {
    std::ifstream in(kData + "/hta_critical_path.json");
    return json::parse(in).at("trace_diff").at("trace_compare/base_vs_test");
  }();
  return ref;
}

ft::profiler::TraceDiffOptions as_in_htas_test() {
  ft::profiler::TraceDiffOptions o;
  o.control_label = "Base Trace";
  o.test_label = "Test Trace";
  o.control_rank = o.test_rank = 1;
  o.control_iteration = o.test_iteration = 1010;
  o.use_short_name = true;
  return o;
}

}  // namespace

// Every row, column and count-change category of HTA's compare_traces, for each device type.
TEST(TraceDiffHtaParity, CompareTracesOnTraceCompare) {
  for (const char* device : {"CPU", "GPU", "ALL"}) {
    SCOPED_TRACE(device);
    ft::profiler::TraceDiffOptions o = as_in_htas_test();
    o.device = device;
    const json got = ft::profiler::compare_traces(kData + "/hta/trace_compare/base",
                                                  kData + "/hta/trace_compare/test", o);
    const json& want = reference().at(device);
    EXPECT_EQ(want.at("n_rows"), got.at("n_rows"));
    EXPECT_EQ(want.at("columns"), got.at("columns"));
    EXPECT_EQ(want.at("counts_change_categories"), got.at("counts_change_categories"));
    ASSERT_EQ(want.at("records").size(), got.at("records").size()) << got.dump(1);
    for (size_t i = 0; i < want.at("records").size(); ++i) {
      const json& w = want.at("records")[i];
      const json& g = got.at("records")[i];
      for (const auto& [k, v] : w.items()) {
        if (v.is_number()) {
          EXPECT_EQ(v.get<int64_t>(), g.at(k).get<int64_t>()) << i << " " << k;
        } else {
          EXPECT_EQ(v, g.at(k)) << i << " " << k;
        }
      }
    }
  }
}

TEST(TraceDiffHtaParity, OpsDiffOnTheCpu) {
  ft::profiler::TraceDiffOptions o = as_in_htas_test();
  o.device = "CPU";
  EXPECT_EQ(reference().at("ops_diff_CPU"),
            ft::profiler::ops_diff(kData + "/hta/trace_compare/base",
                                   kData + "/hta/trace_compare/test", o));
}

TEST(TraceDiff, ShortNamesAsHtas) {
  using ft::profiler::hta_short_name;
  EXPECT_EQ(hta_short_name("aten::linear"), "aten::linear");
  EXPECT_EQ(hta_short_name("void at::native::vectorized_elementwise_kernel<4, "
                           "at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, "
                           "at::native::FillFunctor<float>, at::detail::Array<char*, 1>)"),
            "at::native::vectorized_elementwise_kernel");
  EXPECT_EQ(hta_short_name("Memcpy DtoH (Device -> Pageable)"), "Memcpy DtoH (Device -> Pageable)");
  EXPECT_EQ(hta_short_name("auto f() -> int"), "int");  // HTA keeps the last word
}

TEST(TraceDiff, MissingIterationOrRankIsAClearError) {
  ft::profiler::TraceDiffOptions o = as_in_htas_test();
  o.test_iteration = 7;
  try {
    ft::profiler::compare_traces(kData + "/hta/trace_compare/base",
                                 kData + "/hta/trace_compare/test", o);
    ADD_FAILURE() << "no error";
  } catch (const ft::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("has no iteration 7"), std::string::npos) << e.what();
  }
  o = as_in_htas_test();
  o.control_rank = 5;
  EXPECT_THROW(ft::profiler::compare_traces(kData + "/hta/trace_compare/base",
                                            kData + "/hta/trace_compare/test", o),
               ft::ConfigError);
}

// kineto_reader_fuzz.cpp: libFuzzer entry point. The per-input body (Kineto reader, HTA
// analyses, prepare, diagnose, ft's trace reader, the report.json reader and every report
// writer) is fuzz_body.h's fuzz_one_input, which tests/fuzz_regression_test.cpp also runs over
// tests/data/fuzz/.
#include <cstddef>
#include <cstdint>

#include "fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz_one_input(data, size);
  return 0;
}

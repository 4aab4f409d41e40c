// shard_test.cpp: llm.c shard validation beyond data_test: vocabulary bounds, header fields,
// non-files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/trainer/data.h"

namespace ft::trainer::data {
namespace {

namespace fs = std::filesystem;

class ShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ft_shard_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A shard written by hand: header {magic, version, count} then raw payload bytes.
  fs::path raw_shard(const std::string& name, int32_t magic, int32_t version, int32_t count,
                     const std::string& payload) {
    std::string bytes(1024, '\0');
    const int32_t h[3] = {magic, version, count};
    std::memcpy(bytes.data(), h, sizeof h);
    bytes += payload;
    write_file_atomic(dir_ / name, bytes);
    return dir_ / name;
  }

  template <typename E>
  void expect_error(const std::function<void()>& fn, const std::vector<std::string>& needles) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected " << needles[0];
    } catch (const E& e) {
      for (const auto& n : needles) {
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << " lacks " << n;
      }
    }
  }

  fs::path dir_;
};

TEST_F(ShardTest, RejectsIdsOutsideTheVocabularyNamingFileAndPosition) {
  const fs::path v1 = dir_ / "v1.bin";
  write_llmc_shard(v1, {0, 255, 256, 3}, 1);
  expect_error<FormatError>([&] { open_llmc_shard(v1, 256); },
                            {"v1.bin", "token 256 at position 2", "vocabulary of 256"});
  EXPECT_EQ(open_llmc_shard(v1, 257)->size(), 4u);
  EXPECT_EQ(open_llmc_shard(v1, 257)->max_token(), 256);
  EXPECT_THROW(open_llmc_shard(v1, 0), ConfigError);
  const fs::path v7 = dir_ / "v7.bin";
  write_llmc_shard(v7, {5, 100000}, 7);
  expect_error<FormatError>([&] { open_llmc_shard(v7, 50257); },
                            {"v7.bin", "token 100000 at position 1"});
  // A uint32 id above INT32_MAX is out of any vocabulary, not a negative number.
  uint32_t big[2] = {7u, 4000000000u};
  const fs::path huge = raw_shard("huge.bin", 20240520, 7, 2,
                                  std::string(reinterpret_cast<const char*>(big), sizeof big));
  expect_error<FormatError>([&] { open_llmc_shard(huge, 50257); },
                            {"huge.bin", "token 4000000000 at position 1"});
}

TEST_F(ShardTest, RejectsBadHeaders) {
  expect_error<FormatError>([&] { open_llmc_shard(raw_shard("neg.bin", 20240520, 1, -4, "")); },
                            {"neg.bin", "negative token count -4"});
  expect_error<FormatError>([&] { open_llmc_shard(raw_shard("v0.bin", 20240520, 0, 0, "")); },
                            {"v0.bin", "unsupported version 0"});
  expect_error<FormatError>([&] { open_llmc_shard(raw_shard("magic.bin", 20240521, 1, 0, "")); },
                            {"magic.bin", "bad magic 20240521 (expected 20240520)"});
  // v7 needs 4 bytes per token: 3 tokens of payload 10 bytes is a size mismatch.
  expect_error<FormatError>(
      [&] { open_llmc_shard(raw_shard("odd.bin", 20240520, 7, 3, std::string(10, 'x'))); },
      {"odd.bin", "expected 1036 bytes, actual 1034"});
  // Header count larger than the payload (a truncated copy).
  expect_error<FormatError>(
      [&] { open_llmc_shard(raw_shard("short.bin", 20240520, 1, 100, std::string(20, 'x'))); },
      {"short.bin", "header says 100 tokens"});
  // An empty shard (count 0) is valid.
  EXPECT_EQ(open_llmc_shard(raw_shard("empty.bin", 20240520, 1, 0, ""))->size(), 0u);
}

TEST_F(ShardTest, RejectsMissingFilesAndDirectories) {
  expect_error<IoError>([&] { open_llmc_shard(dir_ / "absent.bin"); }, {"absent.bin"});
  fs::create_directories(dir_ / "d.bin");
  expect_error<FormatError>([&] { open_llmc_shard(dir_ / "d.bin"); },
                            {"d.bin", "not a regular file"});
}

}  // namespace
}  // namespace ft::trainer::data

// atomic_file_test.cpp: atomic replacement, cleanup of uncommitted writes, read_file and CRC32.
#include "ft/core/atomic_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "ft/core/error.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ft_atomic_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  size_t count_files() const {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++n;
    return n;
  }
  fs::path dir_;
};

TEST_F(AtomicFileTest, CommitCreatesFile) {
  const fs::path p = dir_ / "a.txt";
  write_file_atomic(p, "hello");
  EXPECT_EQ(read_file(p), "hello");
  EXPECT_EQ(count_files(), 1u);  // no temp left behind
}

TEST_F(AtomicFileTest, CommitReplacesOnlyAtCommit) {
  const fs::path p = dir_ / "a.txt";
  write_file_atomic(p, "old contents");
  {
    AtomicFileWriter w(p);
    w.write("new", 3);
    w.write(" contents!", 10);
    EXPECT_EQ(w.bytes_written(), 13u);
    // Until commit the old file is intact and the temp sits beside it.
    EXPECT_EQ(read_file(p), "old contents");
    EXPECT_EQ(count_files(), 2u);
    w.commit();
  }
  EXPECT_EQ(read_file(p), "new contents!");
  EXPECT_EQ(count_files(), 1u);
}

TEST_F(AtomicFileTest, UncommittedWriterLeavesNoFileAndNoTemp) {
  const fs::path p = dir_ / "never.bin";
  {
    AtomicFileWriter w(p);
    w.write("partial", 7);
  }
  EXPECT_FALSE(fs::exists(p));
  EXPECT_EQ(count_files(), 0u);
}

TEST_F(AtomicFileTest, UncommittedWriterKeepsOldFile) {
  const fs::path p = dir_ / "keep.txt";
  write_file_atomic(p, "keep me");
  try {
    AtomicFileWriter w(p);
    w.write("garbage", 7);
    throw std::runtime_error("simulated failure");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read_file(p), "keep me");
  EXPECT_EQ(count_files(), 1u);
}

TEST_F(AtomicFileTest, LargeWrite) {
  std::string big(5 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + 7);
  const fs::path p = dir_ / "big.bin";
  write_file_atomic(p, big);
  EXPECT_EQ(read_file(p), big);
}

TEST_F(AtomicFileTest, EmptyFile) {
  const fs::path p = dir_ / "empty";
  write_file_atomic(p, "");
  EXPECT_TRUE(fs::exists(p));
  EXPECT_EQ(read_file(p), "");
}

TEST_F(AtomicFileTest, MissingDirectoryThrowsIoErrorWithPath) {
  const fs::path p = dir_ / "no" / "such" / "dir" / "x.txt";
  try {
    AtomicFileWriter w(p);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("x.txt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
}

TEST_F(AtomicFileTest, SetOfFilesIsWrittenAllOrNone) {
  const fs::path a = dir_ / "a.txt", b = dir_ / "b.txt";
  write_files_atomic({{a, "first a"}, {b, "first b"}});
  EXPECT_EQ(read_file(a), "first a");
  EXPECT_EQ(read_file(b), "first b");
  EXPECT_EQ(count_files(), 2u);  // no temps left behind
  // One file of the set cannot be written: none is replaced, and no temp is left.
  const fs::path bad = dir_ / "missing" / "c.txt";
  EXPECT_THROW(write_files_atomic({{a, "second a"}, {bad, "c"}, {b, "second b"}}), IoError);
  EXPECT_EQ(read_file(a), "first a");
  EXPECT_EQ(read_file(b), "first b");
  EXPECT_EQ(count_files(), 2u);
  write_files_atomic({{b, "third b"}, {a, "third a"}});
  EXPECT_EQ(read_file(a), "third a");
  EXPECT_EQ(read_file(b), "third b");
}

// Files staged from several threads while others are still being produced: nothing is replaced
// before commit, a set dropped uncommitted leaves only the old files, and a committed one
// replaces them all.
TEST_F(AtomicFileTest, StagedSetReplacesNothingBeforeCommit) {
  const fs::path a = dir_ / "a.txt", b = dir_ / "b.txt";
  write_files_atomic({{a, "old a"}, {b, "old b"}});
  const std::string new_a(1 << 20, 'a'), new_b = "new b";
  {
    AtomicFileSet set;
    std::thread t([&] { set.stage(a, new_a); });
    set.stage(b, new_b);
    t.join();
    EXPECT_EQ(read_file(a), "old a");
  }  // dropped uncommitted
  EXPECT_EQ(read_file(a), "old a");
  EXPECT_EQ(read_file(b), "old b");
  EXPECT_EQ(count_files(), 2u);
  AtomicFileSet set;
  set.stage(a, new_a);
  set.stage(b, new_b);
  set.commit();
  EXPECT_EQ(read_file(a), new_a);
  EXPECT_EQ(read_file(b), new_b);
  EXPECT_EQ(count_files(), 2u);
  EXPECT_THROW(set.stage(a, "late"), IoError);
}

TEST_F(AtomicFileTest, ReadMissingFileThrowsIoError) {
  EXPECT_THROW(read_file(dir_ / "missing"), IoError);
}

// A writer killed outright (SIGKILL, no destructor) leaves its temp file; the next writer of the
// same path removes it, while a temp file of a live process (pid 1) stays.
TEST_F(AtomicFileTest, KilledWritersTempFileIsRemovedByTheNextWriter) {
  const fs::path p = dir_ / "checkpoint.ft";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    AtomicFileWriter w(p);
    const std::string data(1 << 20, 'x');
    w.write(data.data(), data.size());
    ::raise(SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  fs::path stale = p;
  stale += ".tmp." + std::to_string(child);
  ASSERT_TRUE(fs::exists(stale));
  EXPECT_EQ(fs::file_size(stale), 1u << 20);
  fs::path live = p;
  live += ".tmp.1";
  write_file_atomic(dir_ / "other", "");  // another path's writer leaves them alone
  { std::ofstream(live) << "live"; }
  EXPECT_TRUE(fs::exists(stale));
  write_file_atomic(p, "new");
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_EQ(read_file(p), "new");
}

TEST(Crc32Test, KnownVector) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32("", 0), 0u);
}

TEST(Crc32Test, RunningCrcMatchesOneShot) {
  const std::string s = "The quick brown fox jumps over the lazy dog";
  const uint32_t whole = crc32(s.data(), s.size());
  EXPECT_EQ(whole, 0x414FA339u);
  uint32_t c = crc32(s.data(), 10);
  c = crc32(s.data() + 10, s.size() - 10, c);
  EXPECT_EQ(c, whole);
}

}  // namespace
}  // namespace ft

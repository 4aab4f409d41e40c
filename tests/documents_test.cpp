// documents_test.cpp: for_each_document over text, fortune, JSONL, gzip and directories.
#include "ft/trainer/documents.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"

namespace ft::trainer::data {
namespace {

namespace fs = std::filesystem;

class DocumentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ft_documents_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  struct Doc {
    std::string text, file;
    uint64_t line;
  };
  static std::vector<Doc> read(const std::vector<fs::path>& paths, DocumentReadOptions o = {}) {
    std::vector<Doc> docs;
    for_each_document(
        paths,
        [&](std::string_view text, const DocumentOrigin& origin) {
          docs.push_back({std::string(text), origin.file, origin.line});
          return true;
        },
        o);
    return docs;
  }
  fs::path dir_;
};

TEST_F(DocumentsTest, TextSplitsAtBlankLinesAndPercentLines) {
  const fs::path p = dir_ / "a.txt";
  write_file_atomic(p, "first doc\nline two\r\n\n\n  \nsecond\n%\nthird fortune\n%\n");
  const auto docs = read({p});
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0].text, "first doc\nline two");
  EXPECT_EQ(docs[0].line, 1u);
  EXPECT_EQ(docs[1].text, "second");
  EXPECT_EQ(docs[1].line, 6u);
  EXPECT_EQ(docs[2].text, "third fortune");
  EXPECT_EQ(docs[2].line, 8u);
}

TEST_F(DocumentsTest, LastDocumentWithoutTrailingNewline) {
  const fs::path p = dir_ / "b.txt";
  write_file_atomic(p, "only one");
  const auto docs = read({p});
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].text, "only one");
}

TEST_F(DocumentsTest, LongLinesBeyondTheBuffer) {
  const std::string big(1 << 20, 'x');  // 4x the reader's initial buffer
  const fs::path p = dir_ / "big.txt";
  write_file_atomic(p, big + "\n\n" + big + "y\n");
  const auto docs = read({p});
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].text, big);
  EXPECT_EQ(docs[1].text, big + "y");
}

TEST_F(DocumentsTest, JsonlTextFieldAndErrors) {
  const fs::path p = dir_ / "c.jsonl";
  write_file_atomic(p, "{\"text\": \"a\\nb\", \"id\": 1}\n\n{\"text\": \"  \"}\n{\"body\": \"x\", \"text\": \"z\"}\n");
  auto docs = read({p});
  ASSERT_EQ(docs.size(), 2u);  // the blank-text document is skipped
  EXPECT_EQ(docs[0].text, "a\nb");
  EXPECT_EQ(docs[1].text, "z");
  EXPECT_EQ(docs[1].line, 4u);
  DocumentReadOptions o;
  o.text_field = "body";
  EXPECT_THROW(
      {
        try {
          read({p}, o);
        } catch (const FormatError& e) {
          EXPECT_NE(std::string(e.what()).find("c.jsonl:1"), std::string::npos) << e.what();
          throw;
        }
      },
      FormatError);
  const fs::path bad = dir_ / "bad.jsonl";
  write_file_atomic(bad, "{\"text\": \"ok\"}\n{\"text\": \"unterminated\n");
  EXPECT_THROW(
      {
        try {
          read({bad});
        } catch (const FormatError& e) {
          EXPECT_NE(std::string(e.what()).find("bad.jsonl:2"), std::string::npos) << e.what();
          throw;
        }
      },
      FormatError);
}

TEST_F(DocumentsTest, GzipAndDirectoryOrder) {
  fs::create_directories(dir_ / "sub");
  fs::create_directories(dir_ / ".hidden");
  write_file_atomic(dir_ / "b.txt", "from b\n");
  write_file_atomic(dir_ / "sub" / "a.txt", "from sub/a\n");
  write_file_atomic(dir_ / ".hidden" / "x.txt", "hidden\n");
  write_file_atomic(dir_ / "shard.bin", std::string(64, '\0'));
  {
    gzFile gz = gzopen((dir_ / "a.jsonl.gz").c_str(), "wb");
    ASSERT_NE(gz, nullptr);
    const std::string body = "{\"text\": \"zipped\"}\n";
    gzwrite(gz, body.data(), static_cast<unsigned>(body.size()));
    gzclose(gz);
  }
  const auto docs = read({dir_});
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0].text, "zipped");  // a.jsonl.gz < b.txt < sub/a.txt
  EXPECT_EQ(docs[1].text, "from b");
  EXPECT_EQ(docs[2].text, "from sub/a");
  EXPECT_EQ(list_document_files({dir_}).size(), 3u);
}

TEST_F(DocumentsTest, MissingPathIsAConfigError) {
  EXPECT_THROW(read({dir_ / "nope.txt"}), ConfigError);
}

TEST_F(DocumentsTest, EarlyStop) {
  const fs::path p = dir_ / "d.txt";
  write_file_atomic(p, "1\n\n2\n\n3\n");
  int seen = 0;
  for_each_document({p}, [&](std::string_view, const DocumentOrigin&) { return ++seen < 2; });
  EXPECT_EQ(seen, 2);
}

// Byte ranges (ft-data clean's slices across ranks): cut a file anywhere into [0, k) and
// [k, end); the two reads together are the whole read, in order, with file-wide line numbers.
TEST_F(DocumentsTest, ByteRangesPartitionTheDocuments) {
  const fs::path text = dir_ / "t.txt", jsonl = dir_ / "j.jsonl";
  write_file_atomic(text, "a one\ntwo\r\n\n  \nb\n%\nc fortune\n%\n\nd\ne\n\nlast");
  write_file_atomic(jsonl, "{\"text\": \"x\"}\n\n{\"text\": \"y\"}\r\n{\"text\": \"z\"}");
  for (const fs::path& p : {text, jsonl}) {
    const auto all = read({p});
    ASSERT_GE(all.size(), 3u) << p;
    const uint64_t size = fs::file_size(p);
    for (uint64_t k = 0; k <= size; ++k) {
      DocumentReadOptions first, second;
      first.range_end = k;
      second.range_begin = k;
      auto got = read({p}, first);
      for (auto& d : read({p}, second)) got.push_back(d);
      ASSERT_EQ(got.size(), all.size()) << p << " cut at " << k;
      for (size_t i = 0; i < all.size(); ++i) {
        EXPECT_EQ(got[i].text, all[i].text) << p << " cut at " << k;
        EXPECT_EQ(got[i].line, all[i].line) << p << " cut at " << k;
      }
    }
  }
}

}  // namespace
}  // namespace ft::trainer::data

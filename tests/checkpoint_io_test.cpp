// checkpoint_io_test.cpp: ft checkpoint roundtrip and corruption detection; llm.c model files.
#include "ft/trainer/checkpoint_io.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"

namespace ft::trainer {
namespace {

namespace fs = std::filesystem;

// A plain (non-fsynced) write: the corruption loops write thousands of files.
void write_plain(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << p;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ft_ckpt_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    params_.resize(300);
    for (size_t i = 0; i < params_.size(); ++i) params_[i] = 0.25f * static_cast<float>(i) - 3;
    rng_ = {0x0123456789abcdefULL, 42};
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the standard test checkpoint and returns its path.
  fs::path write_standard() {
    const fs::path p = dir_ / "model.ckpt";
    CheckpointWriter w;
    w.set_meta({{"step", 17}, {"config", {{"L", 2}, {"C", 16}}}, {"note", "hi"}});
    w.add_section("params", params_.data(), params_.size() * sizeof(float));
    w.add_section("rng", rng_.data(), rng_.size() * sizeof(uint64_t));
    w.add_section("empty", nullptr, 0);
    w.add_section("text", "abc", 3);
    w.commit(p);
    return p;
  }

  // Expects reading `bytes` as a checkpoint to throw FormatError containing `needle`.
  void expect_format_error(const std::string& bytes, const std::string& needle,
                           const std::string& context) {
    const fs::path p = dir_ / "bad.ckpt";
    write_plain(p, bytes);
    try {
      CheckpointReader r(p);
      ADD_FAILURE() << context << ": no FormatError";
    } catch (const FormatError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(needle), std::string::npos) << context << ": " << what;
      EXPECT_NE(what.find("bad.ckpt"), std::string::npos) << context << ": " << what;
    }
  }

  // A checkpoint file from an explicit header and data area (for malformed tables).
  static std::string raw_checkpoint(const std::string& header, const std::string& data,
                                    size_t data_start) {
    std::string out = "FTCKPT01";
    const uint64_t hlen = header.size();
    out.append(reinterpret_cast<const char*>(&hlen), sizeof(hlen));
    out += header;
    out.resize(data_start, '\0');
    out += data;
    const uint32_t crc = crc32(header.data(), header.size());
    out.append(reinterpret_cast<const char*>(&crc), sizeof(crc));
    out += "FTCKEND1";
    return out;
  }

  fs::path dir_;
  std::vector<float> params_;
  std::vector<uint64_t> rng_;
};

TEST_F(CheckpointTest, RoundtripMetaAndSections) {
  const fs::path p = write_standard();
  CheckpointReader r(p);
  EXPECT_EQ(r.meta()["step"], 17);
  EXPECT_EQ(r.meta()["config"]["C"], 16);
  EXPECT_EQ(r.meta()["note"], "hi");
  ASSERT_TRUE(r.has("params"));
  EXPECT_FALSE(r.has("nope"));
  EXPECT_EQ(r.section_bytes("params"), params_.size() * sizeof(float));
  std::vector<float> got(params_.size());
  r.read("params", got.data(), got.size() * sizeof(float));
  EXPECT_EQ(got, params_);
  std::vector<uint64_t> rng(2);
  r.read("rng", rng.data(), 16);
  EXPECT_EQ(rng, rng_);
  EXPECT_EQ(r.section_bytes("empty"), 0u);
  r.read("empty", nullptr, 0);
  char text[3];
  r.read("text", text, 3);
  EXPECT_EQ(std::string(text, 3), "abc");
}

TEST_F(CheckpointTest, SectionsAre64ByteAligned) {
  const std::string bytes = read_file(write_standard());
  uint64_t hlen;
  std::memcpy(&hlen, bytes.data() + 8, 8);
  const auto h = nlohmann::json::parse(bytes.substr(16, hlen));
  ASSERT_EQ(h["sections"].size(), 4u);
  for (const auto& s : h["sections"]) {
    EXPECT_EQ(s["offset"].get<size_t>() % 64, 0u) << s.dump();
    EXPECT_GE(s["offset"].get<size_t>(), 16 + hlen);
  }
  EXPECT_EQ(bytes.substr(bytes.size() - 8), "FTCKEND1");
}

TEST_F(CheckpointTest, EmptyCheckpoint) {
  const fs::path p = dir_ / "empty.ckpt";
  CheckpointWriter w;
  w.commit(p);
  CheckpointReader r(p);
  EXPECT_TRUE(r.meta().is_object());
  EXPECT_FALSE(r.has("params"));
}

TEST_F(CheckpointTest, OverwriteIsAtomicReplacement) {
  const fs::path p = write_standard();
  params_[0] = 99.f;
  write_standard();
  CheckpointReader r(p);
  float first[300];
  r.read("params", first, sizeof(first));
  EXPECT_EQ(first[0], 99.f);
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++n;
  EXPECT_EQ(n, 1u);
}

TEST_F(CheckpointTest, DuplicateSectionRejected) {
  CheckpointWriter w;
  w.add_section("a", "x", 1);
  EXPECT_THROW(w.add_section("a", "y", 1), ConfigError);
}

TEST_F(CheckpointTest, TruncationAtEveryOffsetThrowsFormatError) {
  const std::string bytes = read_file(write_standard());
  for (size_t n = 0; n < bytes.size(); ++n) {
    expect_format_error(bytes.substr(0, n), "truncated", "truncated to " + std::to_string(n));
  }
}

TEST_F(CheckpointTest, TrailingBytesRejected) {
  const std::string bytes = read_file(write_standard());
  // Extra bytes move the trailer: the end magic is no longer at the end.
  expect_format_error(bytes + std::string(7, 'x'), "end magic", "7 trailing bytes");
  expect_format_error(bytes + bytes.substr(bytes.size() - 12), "trailing", "duplicated trailer");
}

TEST_F(CheckpointTest, BitFlipsInHeaderDetected) {
  const std::string bytes = read_file(write_standard());
  uint64_t hlen;
  std::memcpy(&hlen, bytes.data() + 8, 8);
  for (size_t byte = 0; byte < 16 + hlen; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[byte] = static_cast<char>(bad[byte] ^ (1 << bit));
      const std::string ctx = "flip byte " + std::to_string(byte) + " bit " + std::to_string(bit);
      if (byte < 8) {
        expect_format_error(bad, "bad magic", ctx);
      } else if (byte < 16) {
        expect_format_error(bad, "", ctx);  // header length: any clear FormatError
      } else {
        expect_format_error(bad, "header CRC mismatch", ctx);
      }
    }
  }
}

TEST_F(CheckpointTest, BitFlipsInTrailerDetected) {
  const std::string bytes = read_file(write_standard());
  for (size_t byte = bytes.size() - 12; byte < bytes.size(); ++byte) {
    std::string bad = bytes;
    bad[byte] = static_cast<char>(bad[byte] ^ 0x10);
    const bool in_crc = byte < bytes.size() - 8;
    expect_format_error(bad, in_crc ? "header CRC mismatch" : "end magic",
                        "trailer byte " + std::to_string(byte));
  }
}

TEST_F(CheckpointTest, BitFlipsInSectionDetected) {
  const std::string bytes = read_file(write_standard());
  uint64_t hlen;
  std::memcpy(&hlen, bytes.data() + 8, 8);
  const auto h = nlohmann::json::parse(bytes.substr(16, hlen));
  for (const auto& s : h["sections"]) {
    const std::string name = s["name"];
    const size_t off = s["offset"], n = s["bytes"];
    for (size_t byte = off; byte < off + n; byte += (name == "params" ? 7 : 1)) {
      for (int bit = 0; bit < 8; bit += 3) {
        std::string bad = bytes;
        bad[byte] = static_cast<char>(bad[byte] ^ (1 << bit));
        expect_format_error(bad, "section '" + name + "' CRC mismatch",
                            "flip byte " + std::to_string(byte));
      }
    }
  }
}

TEST_F(CheckpointTest, WrongMagic) {
  std::string bytes = read_file(write_standard());
  bytes.replace(0, 8, "GGUFxxxx");
  expect_format_error(bytes, "bad magic", "wrong magic");
  expect_format_error("not a checkpoint at all, just some text that is long enough", "bad magic",
                      "text file");
}

TEST_F(CheckpointTest, SectionOutOfBounds) {
  const std::string data(64, 'd');
  auto header = [&](size_t off, size_t n) {
    nlohmann::json h = {{"file_bytes", 0}, {"meta", nlohmann::json::object()}};
    h["sections"] = {{{"name", "params"}, {"offset", off}, {"bytes", n}, {"crc32", 0}}};
    // file_bytes depends on the header size; fix it up in two passes.
    std::string s = h.dump();
    const size_t start = (16 + s.size() + 63) / 64 * 64 + 64;
    h["file_bytes"] = start + data.size() + 12;
    s = h.dump();
    return std::make_pair(s, start);
  };
  auto [h1, start1] = header(1 << 20, 8);
  expect_format_error(raw_checkpoint(h1, data, start1), "section 'params' out of bounds",
                      "offset past end");
  auto [h2, start2] = header(0, 8);  // overlaps the header
  expect_format_error(raw_checkpoint(h2, data, start2), "section 'params' out of bounds",
                      "offset inside header");
  auto [h3, start3] = header(start2, 1000);
  expect_format_error(raw_checkpoint(h3, data, start3), "section 'params' out of bounds",
                      "bytes past end");
}

TEST_F(CheckpointTest, MalformedHeaderJson) {
  const std::string h = "{\"sections\": [";
  expect_format_error(raw_checkpoint(h, "", 64), "header JSON", "unparsable JSON");
  const std::string h2 = "{\"meta\": {}}";  // no file_bytes / sections
  expect_format_error(raw_checkpoint(h2, "", 64), "malformed header", "missing keys");
}

TEST_F(CheckpointTest, MissingSectionAndSizeMismatch) {
  CheckpointReader r(write_standard());
  float buf[301];
  try {
    r.read("adam_m", buf, 4);
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("missing section 'adam_m'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(r.section_bytes("adam_m"), FormatError);
  try {
    r.read("params", buf, sizeof(buf));
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("size mismatch"), std::string::npos) << e.what();
  }
}

// ---- llm.c model files -------------------------------------------------------------------

GptConfig small_config() {
  GptConfig c;
  c.max_seq_len = 8;
  c.vocab_size = 50;
  c.padded_vocab = 64;
  c.num_layers = 2;
  c.num_heads = 2;
  c.channels = 16;
  return c;
}

std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 1000) * 0.001f - 0.5f;
  return v;
}

TEST_F(CheckpointTest, LlmcRoundtrip) {
  const GptConfig c = small_config();
  const std::vector<float> params = ramp(ParamLayout::make(c).total);
  const fs::path p = dir_ / "model.bin";
  write_llmc_model(p, c, params.data());
  EXPECT_EQ(fs::file_size(p), 1024 + params.size() * 4);
  const LlmcModel m = read_llmc_model(p);
  EXPECT_EQ(m.config.max_seq_len, 8);
  EXPECT_EQ(m.config.vocab_size, 50);
  EXPECT_EQ(m.config.padded_vocab, 64);
  EXPECT_EQ(m.config.num_layers, 2);
  EXPECT_EQ(m.config.num_heads, 2);
  EXPECT_EQ(m.config.channels, 16);
  EXPECT_EQ(m.params, params);
  const std::string bytes = read_file(p);
  int32_t header[8];
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(header[0], 20240326);
  EXPECT_EQ(header[1], 3);
  EXPECT_EQ(header[7], 64);
}

class LlmcBadFileTest : public CheckpointTest {
 protected:
  std::string good_bytes() {
    const GptConfig c = small_config();
    const std::vector<float> params = ramp(ParamLayout::make(c).total);
    const fs::path p = dir_ / "good.bin";
    write_llmc_model(p, c, params.data());
    return read_file(p);
  }
  void expect_llmc_error(const std::string& bytes, const std::string& needle) {
    const fs::path p = dir_ / "bad_model.bin";
    write_plain(p, bytes);
    try {
      read_llmc_model(p);
      ADD_FAILURE() << "no FormatError for " << needle;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad_model.bin"), std::string::npos) << e.what();
    }
  }
  static void set_int(std::string& bytes, int index, int32_t v) {
    std::memcpy(bytes.data() + 4 * index, &v, 4);
  }
};

TEST_F(LlmcBadFileTest, MissingPaddedVocabMeansVp) {
  std::string bytes = good_bytes();
  set_int(bytes, 3, 64);  // V = 64, Vp absent: same parameter count as Vp = 64
  set_int(bytes, 7, 0);
  const fs::path p = dir_ / "old.bin";
  write_file_atomic(p, bytes);
  const LlmcModel m = read_llmc_model(p);
  EXPECT_EQ(m.config.vocab_size, 64);
  EXPECT_EQ(m.config.padded_vocab, 64);
}

TEST_F(LlmcBadFileTest, BadMagic) {
  std::string bytes = good_bytes();
  set_int(bytes, 0, 20240520);
  expect_llmc_error(bytes, "bad magic");
}

TEST_F(LlmcBadFileTest, Bf16VersionRejectedClearly) {
  std::string bytes = good_bytes();
  set_int(bytes, 1, 5);
  expect_llmc_error(bytes, "only fp32 version 3");
  set_int(bytes, 1, 4);
  expect_llmc_error(bytes, "unsupported version 4");
}

TEST_F(LlmcBadFileTest, Truncated) {
  const std::string bytes = good_bytes();
  expect_llmc_error(bytes.substr(0, 100), "truncated");
  expect_llmc_error(bytes.substr(0, 1024), "truncated");
  expect_llmc_error(bytes.substr(0, bytes.size() - 1), "truncated");
  expect_llmc_error("", "truncated");
}

TEST_F(LlmcBadFileTest, ExtraTrailingBytes) {
  expect_llmc_error(good_bytes() + "xxxx", "trailing");
}

TEST_F(LlmcBadFileTest, AbsurdHeaderDoesNotOverflow) {
  std::string bytes = good_bytes();
  set_int(bytes, 4, 1 << 30);  // L
  set_int(bytes, 6, 1 << 30);  // C
  set_int(bytes, 5, 1 << 30);  // NH
  expect_llmc_error(bytes, "truncated");
  set_int(bytes, 5, 0);
  expect_llmc_error(bytes, "bad header");
}

}  // namespace
}  // namespace ft::trainer

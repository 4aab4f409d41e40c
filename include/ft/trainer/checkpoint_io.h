// checkpoint_io.h: ft's checksummed checkpoint container and llm.c's model-file format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/trainer/gpt_config.h"

namespace ft::trainer {

// An ft checkpoint file: a magic, a JSON header (metadata plus a table of
// named binary sections with offsets, sizes and CRC32s), the sections, and a
// trailer with the header's CRC32. Written atomically.
class CheckpointWriter {
 public:
  void set_meta(nlohmann::json meta) { meta_ = std::move(meta); }
  // The data must stay valid until commit().
  void add_section(const std::string& name, const void* data, size_t bytes);
  void commit(const std::filesystem::path& path);  // atomic; throws IoError

 private:
  nlohmann::json meta_ = nlohmann::json::object();
  struct Section {
    std::string name;
    const void* data;
    size_t bytes;
  };
  std::vector<Section> sections_;
};

// Reads and validates a whole checkpoint on construction: magic, header
// JSON, section bounds, every CRC32. Any problem (truncation, corruption,
// wrong magic) throws FormatError naming the file, the section and offset.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::filesystem::path& path);
  const nlohmann::json& meta() const { return meta_; }
  bool has(const std::string& name) const { return sections_.count(name) != 0; }
  size_t section_bytes(const std::string& name) const;  // throws FormatError if missing
  // Copies a section; throws FormatError if missing or its size differs from `bytes`.
  void read(const std::string& name, void* out, size_t bytes) const;

 private:
  std::filesystem::path path_;
  nlohmann::json meta_;
  std::string blob_;
  struct Entry {
    size_t offset;
    size_t bytes;
  };
  std::map<std::string, Entry> sections_;
};

// ---- llm.c model checkpoint (magic 20240326, version 3 = fp32) ----------------------
// Header: 256 int32 {magic, version, maxT, V, L, NH, C, Vp, 0...}, then the
// parameters as float32 in ParamLayout order (wte has Vp rows).
void write_llmc_model(const std::filesystem::path& path, const GptConfig& config,
                      const float* params);
// Returns the config and the flat parameters. Throws FormatError on a bad magic,
// an unsupported version (only 3 is fp32), a size mismatch or truncation.
struct LlmcModel {
  GptConfig config;
  std::vector<float> params;
};
LlmcModel read_llmc_model(const std::filesystem::path& path);

}  // namespace ft::trainer

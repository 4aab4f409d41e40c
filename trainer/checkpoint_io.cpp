// checkpoint_io.cpp: the checksummed ft checkpoint container and llm.c fp32 model files.
#include "ft/trainer/checkpoint_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <set>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"

namespace ft::trainer {
namespace {

static_assert(std::endian::native == std::endian::little,
              "checkpoint formats are little-endian; big-endian hosts are not supported");

constexpr char kMagic[8] = {'F', 'T', 'C', 'K', 'P', 'T', '0', '1'};
constexpr char kEndMagic[8] = {'F', 'T', 'C', 'K', 'E', 'N', 'D', '1'};
constexpr size_t kPrefixBytes = 16;   // magic + uint64 header length
constexpr size_t kTrailerBytes = 12;  // uint32 header CRC + end magic
constexpr size_t kAlign = 64;
constexpr uint64_t kMaxHeaderBytes = uint64_t{1} << 30;

constexpr int32_t kLlmcModelMagic = 20240326;
constexpr int32_t kLlmcFp32Version = 3;
constexpr int32_t kLlmcBf16Version = 5;
constexpr size_t kLlmcHeaderInts = 256;
constexpr size_t kLlmcHeaderBytes = kLlmcHeaderInts * sizeof(int32_t);

size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

[[noreturn]] void format_error(const std::filesystem::path& path, const std::string& what) {
  throw FormatError(fmt::format("checkpoint '{}': {}", path.string(), what));
}

std::string human_bytes(size_t n) { return fmt::format("{} bytes", n); }

}  // namespace

// ---- CheckpointWriter ------------------------------------------------------------------

void CheckpointWriter::add_section(const std::string& name, const void* data, size_t bytes) {
  for (const Section& s : sections_) {
    if (s.name == name) throw ConfigError(fmt::format("duplicate checkpoint section '{}'", name));
  }
  if (data == nullptr && bytes != 0) {
    throw ConfigError(fmt::format("checkpoint section '{}' has null data", name));
  }
  sections_.push_back({name, data, bytes});
}

void CheckpointWriter::commit(const std::filesystem::path& path) {
  std::vector<uint32_t> crcs;
  crcs.reserve(sections_.size());
  for (const Section& s : sections_) crcs.push_back(crc32(s.data, s.bytes));

  // Section offsets are absolute and depend on the header's length, which
  // depends on the offsets' digits: iterate until the layout is stable.
  std::string header;
  size_t data_start = align_up(kPrefixBytes);
  size_t file_bytes = 0;
  for (int iter = 0;; ++iter) {
    nlohmann::json table = nlohmann::json::array();
    size_t off = data_start;
    for (size_t i = 0; i < sections_.size(); ++i) {
      table.push_back({{"name", sections_[i].name},
                       {"offset", off},
                       {"bytes", sections_[i].bytes},
                       {"crc32", crcs[i]}});
      off = align_up(off + sections_[i].bytes);
    }
    const size_t end = sections_.empty() ? data_start : off;
    file_bytes = end + kTrailerBytes;
    nlohmann::json h = {{"format", "ft-checkpoint"},
                        {"file_bytes", file_bytes},
                        {"meta", meta_},
                        {"sections", std::move(table)}};
    header = h.dump();
    const size_t need = align_up(kPrefixBytes + header.size());
    if (need == data_start) break;
    if (iter > 16) throw IoError("checkpoint header layout did not converge");
    data_start = need;
  }

  AtomicFileWriter w(path);
  static const char kZeros[kAlign] = {};
  auto pad_to = [&](size_t target) {
    while (w.bytes_written() < target) {
      w.write(kZeros, std::min(kAlign, target - w.bytes_written()));
    }
  };
  w.write(kMagic, sizeof(kMagic));
  const uint64_t hlen = header.size();
  w.write(&hlen, sizeof(hlen));
  w.write(header.data(), header.size());
  pad_to(data_start);
  for (const Section& s : sections_) {
    pad_to(align_up(w.bytes_written()));
    w.write(s.data, s.bytes);
  }
  pad_to(align_up(w.bytes_written()));
  const uint32_t hcrc = crc32(header.data(), header.size());
  w.write(&hcrc, sizeof(hcrc));
  w.write(kEndMagic, sizeof(kEndMagic));
  if (w.bytes_written() != file_bytes) {
    throw IoError(fmt::format("checkpoint '{}': wrote {} but planned {}", path.string(),
                              w.bytes_written(), file_bytes));
  }
  w.commit();
}

// ---- CheckpointReader ------------------------------------------------------------------

CheckpointReader::CheckpointReader(const std::filesystem::path& path) : path_(path) {
  blob_ = read_file(path);
  const size_t size = blob_.size();
  if (size < kPrefixBytes) {
    format_error(path, fmt::format("truncated at byte {} of at least {} (no header)", size,
                                   kPrefixBytes + kTrailerBytes));
  }
  if (std::memcmp(blob_.data(), kMagic, sizeof(kMagic)) != 0) {
    format_error(path, "bad magic (not an ft checkpoint; expected \"FTCKPT01\")");
  }
  uint64_t hlen = 0;
  std::memcpy(&hlen, blob_.data() + sizeof(kMagic), sizeof(hlen));
  if (hlen == 0 || hlen > kMaxHeaderBytes) {
    format_error(path, fmt::format("implausible header length {}", hlen));
  }
  const size_t min_size = kPrefixBytes + hlen + kTrailerBytes;
  if (size < min_size) {
    format_error(path, fmt::format("truncated at byte {} of at least {} (header is {} bytes)", size,
                                   min_size, hlen));
  }
  const char* hdr = blob_.data() + kPrefixBytes;
  const char* trailer = blob_.data() + size - kTrailerBytes;

  auto parse_header = [&]() -> nlohmann::json {
    try {
      return nlohmann::json::parse(hdr, hdr + hlen);
    } catch (const nlohmann::json::exception& e) {
      format_error(path, fmt::format("header JSON does not parse: {}", e.what()));
    }
  };

  if (std::memcmp(trailer + sizeof(uint32_t), kEndMagic, sizeof(kEndMagic)) != 0) {
    // Usually a truncated file: say how long it should be if the header tells.
    nlohmann::json h;
    bool parsed = true;
    try {
      h = nlohmann::json::parse(hdr, hdr + hlen);
    } catch (const nlohmann::json::exception&) {
      parsed = false;
    }
    if (parsed && h.is_object() && h.contains("file_bytes") &&
        h["file_bytes"].is_number_unsigned() && h["file_bytes"].get<uint64_t>() > size) {
      format_error(
          path, fmt::format("truncated at byte {} of {}", size, h["file_bytes"].get<uint64_t>()));
    }
    format_error(path, fmt::format("missing end magic \"FTCKEND1\" at byte {} (truncated or "
                                   "corrupt)",
                                   size - sizeof(kEndMagic)));
  }
  uint32_t stored_crc = 0;
  std::memcpy(&stored_crc, trailer, sizeof(stored_crc));
  const uint32_t actual_crc = crc32(hdr, hlen);
  if (stored_crc != actual_crc) {
    format_error(path, fmt::format("header CRC mismatch (stored {:08x}, computed {:08x})",
                                   stored_crc, actual_crc));
  }

  const nlohmann::json h = parse_header();
  try {
    if (!h.is_object()) format_error(path, "header is not a JSON object");
    const uint64_t file_bytes = h.at("file_bytes").get<uint64_t>();
    if (file_bytes != size) {
      format_error(path, file_bytes > size
                             ? fmt::format("truncated at byte {} of {}", size, file_bytes)
                             : fmt::format("{} trailing bytes after the expected end at {}",
                                           size - file_bytes, file_bytes));
    }
    meta_ = h.contains("meta") ? h.at("meta") : nlohmann::json::object();
    const size_t data_begin = kPrefixBytes + hlen;
    const size_t data_end = size - kTrailerBytes;
    for (const nlohmann::json& s : h.at("sections")) {
      const std::string name = s.at("name").get<std::string>();
      const uint64_t off = s.at("offset").get<uint64_t>();
      const uint64_t bytes = s.at("bytes").get<uint64_t>();
      const uint32_t crc = s.at("crc32").get<uint32_t>();
      if (off < data_begin || off > data_end || bytes > data_end - off) {
        format_error(path, fmt::format("section '{}' out of bounds: offset {} + {} bytes, "
                                       "data lies in [{}, {})",
                                       name, off, bytes, data_begin, data_end));
      }
      if (sections_.count(name) != 0) {
        format_error(path, fmt::format("duplicate section '{}'", name));
      }
      const uint32_t got = crc32(blob_.data() + off, bytes);
      if (got != crc) {
        format_error(path, fmt::format("section '{}' CRC mismatch at offset {} (stored {:08x}, "
                                       "computed {:08x})",
                                       name, off, crc, got));
      }
      sections_[name] = Entry{off, bytes};
    }
  } catch (const nlohmann::json::exception& e) {
    format_error(path, fmt::format("malformed header: {}", e.what()));
  }
}

size_t CheckpointReader::section_bytes(const std::string& name) const {
  auto it = sections_.find(name);
  if (it == sections_.end()) format_error(path_, fmt::format("missing section '{}'", name));
  return it->second.bytes;
}

void CheckpointReader::read(const std::string& name, void* out, size_t bytes) const {
  const size_t have = section_bytes(name);
  if (have != bytes) {
    format_error(path_, fmt::format("section '{}' size mismatch: file has {}, expected {}", name,
                                    human_bytes(have), human_bytes(bytes)));
  }
  if (bytes != 0) std::memcpy(out, blob_.data() + sections_.at(name).offset, bytes);
}

// ---- llm.c model files -----------------------------------------------------------------

void write_llmc_model(const std::filesystem::path& path, const GptConfig& config,
                      const float* params) {
  config.validate();
  const ParamLayout layout = ParamLayout::make(config);
  int32_t header[kLlmcHeaderInts] = {};
  header[0] = kLlmcModelMagic;
  header[1] = kLlmcFp32Version;
  header[2] = config.max_seq_len;
  header[3] = config.vocab_size;
  header[4] = config.num_layers;
  header[5] = config.num_heads;
  header[6] = config.channels;
  header[7] = config.padded_vocab;
  AtomicFileWriter w(path);
  w.write(header, sizeof(header));
  w.write(params, layout.total * sizeof(float));
  w.commit();
}

namespace {

[[noreturn]] void llmc_error(const std::filesystem::path& path, const std::string& what) {
  throw FormatError(fmt::format("llm.c model '{}': {}", path.string(), what));
}

void pread_all(int fd, void* out, size_t bytes, size_t offset, const std::filesystem::path& path) {
  char* p = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t n =
        ::pread(fd, p, std::min<size_t>(bytes, size_t{1} << 30), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(fmt::format("cannot read '{}': {}", path.string(), std::strerror(errno)));
    }
    if (n == 0) llmc_error(path, fmt::format("unexpected end of file at byte {}", offset));
    p += n;
    offset += static_cast<size_t>(n);
    bytes -= static_cast<size_t>(n);
  }
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

LlmcModel read_llmc_model(const std::filesystem::path& path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) {
    throw IoError(fmt::format("cannot open '{}': {}", path.string(), std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) {
    throw IoError(fmt::format("cannot stat '{}': {}", path.string(), std::strerror(errno)));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < kLlmcHeaderBytes) {
    llmc_error(path,
               fmt::format("truncated at byte {} of at least {} (header)", size, kLlmcHeaderBytes));
  }
  int32_t header[kLlmcHeaderInts];
  pread_all(f.fd, header, sizeof(header), 0, path);
  if (header[0] != kLlmcModelMagic) {
    llmc_error(path, fmt::format("bad magic {} (expected {})", header[0], kLlmcModelMagic));
  }
  if (header[1] == kLlmcBf16Version) {
    llmc_error(path,
               "version 5 (bf16 parameters) is not supported; only fp32 version 3 "
               "files can be read (export with llm.c's fp32 writer)");
  }
  if (header[1] != kLlmcFp32Version) {
    llmc_error(path,
               fmt::format("unsupported version {}; only fp32 version 3 is supported", header[1]));
  }
  LlmcModel m;
  GptConfig& c = m.config;
  c.max_seq_len = header[2];
  c.vocab_size = header[3];
  c.num_layers = header[4];
  c.num_heads = header[5];
  c.channels = header[6];
  c.padded_vocab = header[7] == 0 ? header[3] : header[7];
  try {
    c.validate();
  } catch (const ConfigError& e) {
    llmc_error(path, fmt::format("bad header: {}", e.what()));
  }
  // Check the size in floating point first so absurd headers cannot overflow size_t.
  const long double C = c.channels, L = c.num_layers;
  const long double approx =
      kLlmcHeaderBytes + 4.0L * (static_cast<long double>(c.padded_vocab) * C +
                                 static_cast<long double>(c.max_seq_len) * C +
                                 L * (12.0L * C * C + 13.0L * C) + 2.0L * C);
  if (approx > static_cast<long double>(size) + 1.0L) {
    llmc_error(path, fmt::format("truncated at byte {} of {:.0f} ({})", size,
                                 static_cast<double>(approx), c.describe()));
  }
  const ParamLayout layout = ParamLayout::make(c);
  const size_t expected = kLlmcHeaderBytes + layout.total * sizeof(float);
  if (size < expected) {
    llmc_error(path, fmt::format("truncated at byte {} of {} ({})", size, expected, c.describe()));
  }
  if (size > expected) {
    llmc_error(path, fmt::format("{} extra trailing bytes: expected {} for {}, file has {}",
                                 size - expected, expected, c.describe(), size));
  }
  m.params.resize(layout.total);
  pread_all(f.fd, m.params.data(), layout.total * sizeof(float), kLlmcHeaderBytes, path);
  return m;
}

}  // namespace ft::trainer

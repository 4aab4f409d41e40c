// shard.cpp: memory-mapped llm.c token shards (magic 20240520; v1 uint16, v7 uint32) and writer.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/trainer/data.h"

namespace ft::trainer::data {
namespace {

constexpr int32_t kShardMagic = 20240520;
constexpr size_t kHeaderInts = 256;
constexpr size_t kHeaderBytes = kHeaderInts * sizeof(int32_t);

[[noreturn]] void shard_error(const std::filesystem::path& path, const std::string& what) {
  throw FormatError(fmt::format("token shard '{}': {}", path.string(), what));
}

class MappedShard : public TokenSource {
 public:
  explicit MappedShard(const std::filesystem::path& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      throw IoError(fmt::format("cannot open '{}': {}", path.string(), std::strerror(errno)));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      throw IoError(fmt::format("cannot stat '{}': {}", path.string(), std::strerror(err)));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      shard_error(path, "not a regular file");
    }
    const size_t size = static_cast<size_t>(st.st_size);
    if (size < kHeaderBytes) {
      ::close(fd);
      shard_error(
          path, fmt::format("truncated: {} bytes, the header alone needs {}", size, kHeaderBytes));
    }
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) {
      throw IoError(fmt::format("cannot mmap '{}': {}", path.string(), std::strerror(err)));
    }
    base_ = static_cast<const unsigned char*>(p);
    map_bytes_ = size;
    try {
      validate(size);
    } catch (...) {
      ::munmap(p, map_bytes_);
      throw;
    }
    ::madvise(p, size, MADV_SEQUENTIAL);
  }
  ~MappedShard() override { ::munmap(const_cast<unsigned char*>(base_), map_bytes_); }
  MappedShard(const MappedShard&) = delete;
  MappedShard& operator=(const MappedShard&) = delete;

  size_t size() const override { return n_; }

  void read(size_t pos, size_t n, int32_t* out) const override {
    if (pos > n_ || n > n_ - pos) {
      throw Error(fmt::format("token read [{}, {}) past the end of '{}' ({} tokens)", pos, pos + n,
                              path_.string(), n_));
    }
    const unsigned char* src = base_ + kHeaderBytes + pos * width_;
    if (width_ == 4) {
      std::memcpy(out, src, n * sizeof(int32_t));
      return;
    }
    for (size_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, sizeof(v));
      out[i] = v;
    }
  }

  int max_token() const override {
    std::call_once(max_once_, [this] {
      int64_t m = -1;
      const unsigned char* src = base_ + kHeaderBytes;
      for (size_t i = 0; i < n_; ++i) {
        if (width_ == 2) {
          uint16_t v;
          std::memcpy(&v, src + 2 * i, sizeof(v));
          m = std::max<int64_t>(m, v);
        } else {
          uint32_t v;
          std::memcpy(&v, src + 4 * i, sizeof(v));
          m = std::max<int64_t>(m, v);
        }
      }
      max_ = static_cast<int>(std::min<int64_t>(m, std::numeric_limits<int>::max()));
    });
    return max_;
  }

 private:
  void validate(size_t size) {
    int32_t header[kHeaderInts];
    std::memcpy(header, base_, sizeof(header));
    if (header[0] != kShardMagic) {
      shard_error(path_, fmt::format("bad magic {} (expected {})", header[0], kShardMagic));
    }
    if (header[1] == 1) {
      width_ = 2;
    } else if (header[1] == 7) {
      width_ = 4;
    } else {
      shard_error(path_,
                  fmt::format("unsupported version {} (1 = uint16 tokens, 7 = uint32)", header[1]));
    }
    if (header[2] < 0) shard_error(path_, fmt::format("negative token count {}", header[2]));
    n_ = static_cast<size_t>(header[2]);
    const size_t expected = kHeaderBytes + n_ * width_;
    if (size != expected) {
      shard_error(path_, fmt::format("size mismatch: header says {} tokens of {} bytes, so "
                                     "expected {} bytes, actual {}",
                                     n_, width_, expected, size));
    }
  }

  std::filesystem::path path_;
  const unsigned char* base_ = nullptr;
  size_t map_bytes_ = 0;
  size_t n_ = 0;
  size_t width_ = 2;
  mutable std::once_flag max_once_;
  mutable int max_ = -1;
};

}  // namespace

std::shared_ptr<TokenSource> open_llmc_shard(const std::filesystem::path& path) {
  return std::make_shared<MappedShard>(path);
}

std::shared_ptr<TokenSource> open_llmc_shard(const std::filesystem::path& path, int vocab_size) {
  if (vocab_size < 1) {
    throw ConfigError(fmt::format("vocabulary size must be >= 1, got {}", vocab_size));
  }
  auto shard = std::make_shared<MappedShard>(path);
  if (shard->max_token() < vocab_size) return shard;
  constexpr size_t kBlock = 1 << 16;
  std::vector<int32_t> buf;
  for (size_t pos = 0; pos < shard->size(); pos += kBlock) {
    const size_t n = std::min(kBlock, shard->size() - pos);
    buf.resize(n);
    shard->read(pos, n, buf.data());
    for (size_t i = 0; i < n; ++i) {
      if (buf[i] < 0 || buf[i] >= vocab_size) {  // < 0: a uint32 id above INT32_MAX
        shard_error(
            path, fmt::format("token {} at position {} is outside the vocabulary of {} "
                              "(ids 0..{})",
                              static_cast<uint32_t>(buf[i]), pos + i, vocab_size, vocab_size - 1));
      }
    }
  }
  return shard;
}

void write_llmc_shard(const std::filesystem::path& path, const std::vector<int32_t>& tokens,
                      int version) {
  if (version != 1 && version != 7) {
    throw ConfigError(
        fmt::format("llm.c shard version must be 1 (uint16) or 7 (uint32), got {}", version));
  }
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw ConfigError(fmt::format("{} tokens do not fit one llm.c shard", tokens.size()));
  }
  const int64_t limit = version == 1 ? 65535 : std::numeric_limits<int32_t>::max();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > limit) {
      throw ConfigError(fmt::format("token {} at position {} does not fit a version {} shard",
                                    tokens[i], i, version));
    }
  }
  int32_t header[kHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = version;
  header[2] = static_cast<int32_t>(tokens.size());
  AtomicFileWriter w(path);
  w.write(header, sizeof(header));
  if (version == 7) {
    w.write(tokens.data(), tokens.size() * sizeof(int32_t));
  } else {
    std::vector<uint16_t> buf;
    constexpr size_t kChunk = 1 << 20;
    for (size_t i = 0; i < tokens.size(); i += kChunk) {
      const size_t n = std::min(kChunk, tokens.size() - i);
      buf.assign(tokens.begin() + static_cast<ptrdiff_t>(i),
                 tokens.begin() + static_cast<ptrdiff_t>(i + n));
      w.write(buf.data(), n * sizeof(uint16_t));
    }
  }
  w.commit();
}

}  // namespace ft::trainer::data

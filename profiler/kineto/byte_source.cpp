// byte_source.cpp: the bytes the JSON tokenizer reads: a plain file, a gzip file (inflated on
// its own thread, ahead of the parser), or memory (json_stream.h).
#include <zlib.h>
#if FT_WITH_ISAL
#include <isa-l/igzip_lib.h>
#endif

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "ft/core/error.h"
#include "ft/core/parallel.h"
#include "json_stream.h"

namespace ft::profiler::kineto {
namespace {

class FileSource : public ByteSource {
 public:
  FileSource(FILE* f, std::string path, uint64_t size)
      : f_(f), path_(std::move(path)), size_(size) {}
  uint64_t size_hint() const override { return size_; }
  ~FileSource() override { std::fclose(f_); }
  size_t read(char* buf, size_t cap) override {
    const size_t n = std::fread(buf, 1, cap, f_);
    if (n == 0 && std::ferror(f_)) throw IoError(path_ + ": read failed: " + std::strerror(errno));
    read_ += n;
    return n;
  }
  uint64_t compressed_bytes_read() const override { return read_; }

 private:
  FILE* f_;
  std::string path_;
  uint64_t read_ = 0;
  uint64_t size_ = 0;
};

// gzip via zlib's inflate with automatic header detection; handles concatenated members.
class GzipSource : public ByteSource {
 public:
  GzipSource(FILE* f, std::string path, uint64_t hint)
      : f_(f), path_(std::move(path)), in_(new unsigned char[kIn]), hint_(hint) {
    std::memset(&zs_, 0, sizeof(zs_));
    if (inflateInit2(&zs_, 15 + 32) != Z_OK) throw IoError(path_ + ": zlib init failed");
  }
  ~GzipSource() override {
    inflateEnd(&zs_);
    std::fclose(f_);
  }
  size_t read(char* buf, size_t cap) override {
    zs_.next_out = reinterpret_cast<unsigned char*>(buf);
    zs_.avail_out = static_cast<uInt>(cap);
    while (zs_.avail_out == cap && !done_) {
      if (zs_.avail_in == 0) {
        const size_t n = std::fread(in_.get(), 1, kIn, f_);
        if (n == 0) {
          if (std::ferror(f_)) throw IoError(path_ + ": read failed: " + std::strerror(errno));
          if (!member_ended_) {
            throw FormatError(path_ + ": truncated gzip stream at compressed byte " +
                              std::to_string(compressed_) + " (decompressed byte " +
                              std::to_string(zs_.total_out + out_before_) + ")");
          }
          done_ = true;
          break;
        }
        compressed_ += n;
        zs_.next_in = in_.get();
        zs_.avail_in = static_cast<uInt>(n);
      }
      member_ended_ = false;
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        member_ended_ = true;
        out_before_ += zs_.total_out;
        const uInt left = zs_.avail_in;
        unsigned char* next = zs_.next_in;
        uInt avail_out = zs_.avail_out;
        unsigned char* next_out = zs_.next_out;
        inflateReset(&zs_);
        zs_.next_in = next;
        zs_.avail_in = left;
        zs_.next_out = next_out;
        zs_.avail_out = avail_out;
        continue;
      }
      if (rc != Z_OK && rc != Z_BUF_ERROR) {
        throw FormatError(path_ + ": corrupt gzip data at compressed byte " +
                          std::to_string(compressed_ - zs_.avail_in) + ": " +
                          (zs_.msg ? zs_.msg : "inflate error"));
      }
    }
    return cap - zs_.avail_out;
  }
  uint64_t compressed_bytes_read() const override { return compressed_; }
  uint64_t size_hint() const override { return hint_; }

 private:
  static constexpr size_t kIn = 1 << 18;
  FILE* f_;
  std::string path_;
  std::unique_ptr<unsigned char[]> in_;
  uint64_t hint_ = 0;
  z_stream zs_;
  uint64_t compressed_ = 0;
  uint64_t out_before_ = 0;
  bool member_ended_ = false;
  bool done_ = false;
};

#if FT_WITH_ISAL
// gzip via ISA-L's igzip inflate (Debian libisal-dev): streams at 3-4x zlib's speed; the
// header and every member's CRC-32 and size are checked; handles concatenated members.
class IsalGzipSource : public ByteSource {
 public:
  IsalGzipSource(FILE* f, std::string path, uint64_t hint)
      : f_(f),
        path_(std::move(path)),
        in_(new unsigned char[kIn]),
        st_(new inflate_state),
        hint_(hint) {
    isal_inflate_init(st_.get());
    st_->crc_flag = ISAL_GZIP;
  }
  ~IsalGzipSource() override { std::fclose(f_); }
  size_t read(char* buf, size_t cap) override {
    inflate_state& st = *st_;
    st.next_out = reinterpret_cast<uint8_t*>(buf);
    st.avail_out = static_cast<uint32_t>(std::min<size_t>(cap, UINT32_MAX));
    const uint32_t want = st.avail_out;
    while (st.avail_out > 0 && !done_) {
      if (st.block_state == ISAL_BLOCK_FINISH) {  // a member ended: another may follow
        if (st.avail_in == 0 && !refill()) {
          done_ = true;
          break;
        }
        out_before_ += st.total_out;
        uint8_t* next_in = st.next_in;
        const uint32_t avail_in = st.avail_in;
        uint8_t* next_out = st.next_out;
        const uint32_t avail_out = st.avail_out;
        isal_inflate_reset(&st);
        st.crc_flag = ISAL_GZIP;
        st.next_in = next_in;
        st.avail_in = avail_in;
        st.next_out = next_out;
        st.avail_out = avail_out;
        st.total_out = 0;
      }
      if (st.avail_in == 0 && !eof_) refill();
      const uint32_t in_before = st.avail_in, out_left = st.avail_out;
      const int rc = isal_inflate(&st);
      if (rc < 0) {
        throw FormatError(path_ + ": corrupt gzip data near compressed byte " +
                          std::to_string(compressed_ - st.avail_in) + ": " + error_name(rc));
      }
      if (st.block_state != ISAL_BLOCK_FINISH && eof_ && st.avail_in == in_before &&
          st.avail_out == out_left) {
        throw FormatError(path_ + ": truncated gzip stream at compressed byte " +
                          std::to_string(compressed_) + " (decompressed byte " +
                          std::to_string(out_before_ + st.total_out) + ")");
      }
    }
    return want - st.avail_out;
  }
  uint64_t compressed_bytes_read() const override { return compressed_; }
  uint64_t size_hint() const override { return hint_; }

 private:
  static constexpr size_t kIn = 1 << 18;
  bool refill() {
    const size_t n = std::fread(in_.get(), 1, kIn, f_);
    if (n == 0) {
      if (std::ferror(f_)) throw IoError(path_ + ": read failed: " + std::strerror(errno));
      eof_ = true;
      return false;
    }
    compressed_ += n;
    st_->next_in = in_.get();
    st_->avail_in = static_cast<uint32_t>(n);
    return true;
  }
  static const char* error_name(int rc) {
    switch (rc) {
      case ISAL_INVALID_BLOCK:
        return "invalid deflate block";
      case ISAL_INVALID_SYMBOL:
        return "invalid deflate symbol";
      case ISAL_INVALID_LOOKBACK:
        return "invalid lookback distance";
      case ISAL_INVALID_WRAPPER:
        return "invalid gzip header";
      case ISAL_UNSUPPORTED_METHOD:
        return "unsupported compression method";
      case ISAL_INCORRECT_CHECKSUM:
        return "CRC-32 or size mismatch";
      default:
        return "inflate error";
    }
  }
  FILE* f_;
  std::string path_;
  std::unique_ptr<unsigned char[]> in_;
  std::unique_ptr<inflate_state> st_;  // ~40 KiB of tables and history
  uint64_t hint_ = 0;
  uint64_t compressed_ = 0;
  uint64_t out_before_ = 0;
  bool eof_ = false;
  bool done_ = false;
};
using GzipReader = IsalGzipSource;
#else
using GzipReader = GzipSource;
#endif

// Runs another source (gzip: inflating is ~a third of the reader's work) on its own thread, a
// few blocks ahead of the parser. Errors reach the parser in order, at the byte they happened.
class ReadAheadSource : public ByteSource {
 public:
  explicit ReadAheadSource(std::unique_ptr<ByteSource> inner)
      : inner_(std::move(inner)), hint_(inner_->size_hint()) {
    for (auto& b : blocks_) b.data.reset(new char[kBlock]);
    thread_ = std::thread([this] { produce(); });
  }
  ~ReadAheadSource() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  size_t read(char* buf, size_t cap) override {
    size_t done = 0;
    while (done < cap) {
      if (cur_ == nullptr) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return filled_ > 0 || finished_; });
        if (filled_ == 0) {
          if (error_) std::rethrow_exception(error_);
          break;  // end of input
        }
        cur_ = &blocks_[head_];
        off_ = 0;
      }
      const size_t n = std::min(cap - done, cur_->len - off_);
      std::memcpy(buf + done, cur_->data.get() + off_, n);
      done += n;
      off_ += n;
      if (off_ == cur_->len) {
        compressed_ = cur_->compressed;
        cur_ = nullptr;
        {
          std::lock_guard<std::mutex> lock(mu_);
          head_ = (head_ + 1) % kBlocks;
          --filled_;
        }
        cv_.notify_all();
      }
    }
    return done;
  }
  uint64_t compressed_bytes_read() const override { return compressed_; }
  uint64_t size_hint() const override { return hint_; }

 private:
  static constexpr size_t kBlocks = 4;
  static constexpr size_t kBlock = size_t{1} << 20;
  struct Block {
    std::unique_ptr<char[]> data;
    size_t len = 0;
    uint64_t compressed = 0;
  };

  void produce() {
    size_t tail = 0;
    try {
      for (;;) {
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [&] { return filled_ < kBlocks || stop_; });
          if (stop_) return;
        }
        Block& b = blocks_[tail];  // not visible to the reader until counted in filled_
        b.len = inner_->read(b.data.get(), kBlock);
        b.compressed = inner_->compressed_bytes_read();
        if (b.len == 0) break;
        {
          std::lock_guard<std::mutex> lock(mu_);
          tail = (tail + 1) % kBlocks;
          ++filled_;
        }
        cv_.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = true;
    }
    cv_.notify_all();
  }

  std::unique_ptr<ByteSource> inner_;
  uint64_t hint_ = 0;
  Block blocks_[kBlocks];
  std::mutex mu_;
  std::condition_variable cv_;
  size_t head_ = 0, filled_ = 0;
  bool stop_ = false, finished_ = false;
  std::exception_ptr error_;
  Block* cur_ = nullptr;  // the block being read (owned by the reader until released)
  size_t off_ = 0;
  uint64_t compressed_ = 0;
  std::thread thread_;  // last: starts after every member it uses exists
};

class MemorySource : public ByteSource {
 public:
  explicit MemorySource(std::string_view d) : d_(d) {}
  size_t read(char* buf, size_t cap) override {
    const size_t n = std::min(cap, d_.size() - pos_);
    std::memcpy(buf, d_.data() + pos_, n);
    pos_ += n;
    return n;
  }
  uint64_t compressed_bytes_read() const override { return pos_; }
  uint64_t size_hint() const override { return d_.size(); }

 private:
  std::string_view d_;
  size_t pos_ = 0;
};

}  // namespace

std::unique_ptr<ByteSource> open_byte_source(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw IoError(path + ": cannot open: " + std::strerror(errno));
  unsigned char magic[2] = {0, 0};
  const size_t n = std::fread(magic, 1, 2, f);
  uint64_t file_size = 0;
  uint32_t isize = 0;  // gzip trailer: uncompressed size mod 2^32 (of the last member)
  if (std::fseek(f, 0, SEEK_END) == 0) {
    const long end = std::ftell(f);
    if (end > 0) file_size = static_cast<uint64_t>(end);
    unsigned char t[4];
    if (end >= 4 && std::fseek(f, -4, SEEK_END) == 0 && std::fread(t, 1, 4, f) == 4) {
      isize = static_cast<uint32_t>(t[0]) | static_cast<uint32_t>(t[1]) << 8 |
              static_cast<uint32_t>(t[2]) << 16 | static_cast<uint32_t>(t[3]) << 24;
    }
  }
  std::rewind(f);
  if (n == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    // Trace JSON compresses 10-20x; the hint only reserves address space, so err high.
    const uint64_t hint = std::max<uint64_t>(isize, std::min<uint64_t>(file_size * 24, 1ull << 36));
    auto gz = std::make_unique<GzipReader>(f, path, hint);
    if (logical_cpus() > 1) return std::make_unique<ReadAheadSource>(std::move(gz));
    return gz;
  }
  return std::make_unique<FileSource>(f, path, file_size);
}

std::unique_ptr<ByteSource> memory_byte_source(std::string_view data) {
  return std::make_unique<MemorySource>(data);
}

std::string read_all_text(const std::string& path, size_t spare) {
  auto src = open_byte_source(path);
  std::string text;
  // Reserved from the size hint (address space: pages are touched only as the text fills them),
  // so the text is not copied again as it grows.
  const uint64_t hint = src->size_hint();
  if (hint > 0 && hint < (uint64_t{1} << 34)) text.reserve(hint + spare);
  std::vector<char> buf(1 << 20);
  while (const size_t n = src->read(buf.data(), buf.size())) text.append(buf.data(), n);
  text.reserve(text.size() + spare);
  return text;
}

}  // namespace ft::profiler::kineto

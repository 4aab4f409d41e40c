// atomic_file.h: crash-safe file writes (temp file, fsync, rename, fsync dir) and CRC32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ft {

// Streams bytes to `<path>.tmp.<pid>`; commit() fsyncs, renames over `path`
// and fsyncs the directory. Destroying an uncommitted writer removes the temp
// file, so a crash or exception never leaves a half-written `path`; a writer
// killed outright (kill -9) leaves its temp file, which the next writer of the
// same path removes (remove_stale_temp_files).
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path path);  // throws IoError
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  void write(const void* data, size_t bytes);  // throws IoError
  size_t bytes_written() const { return written_; }
  void sync();  // fsyncs what was written (commit then does not again); throws IoError
  // Renames over `path` (after an fsync, unless sync() came first) and, when `sync_dir`, fsyncs
  // the directory; throws IoError.
  void commit(bool sync_dir = true);

 private:
  std::filesystem::path path_;
  std::filesystem::path tmp_;
  int fd_ = -1;
  size_t written_ = 0;
  bool synced_ = false, committed_ = false;
};

// Removes `<path>.tmp.<pid>` files whose process no longer exists; returns how many.
size_t remove_stale_temp_files(const std::filesystem::path& path);

// Files replaced all or none, each staged as soon as its contents are ready: written and fsynced
// on a thread of its own, so that the disk's flushes overlap the caller's work. commit() waits
// for every one, renames them only when all were written, and fsyncs each directory once; it
// throws the first staging error (as IoError), leaving no file replaced. Destroying an
// uncommitted set waits for its threads and removes its temp files. stage() may be called from
// several threads; `contents` must stay alive until commit() or destruction.
class AtomicFileSet {
 public:
  AtomicFileSet();
  ~AtomicFileSet();
  AtomicFileSet(const AtomicFileSet&) = delete;
  AtomicFileSet& operator=(const AtomicFileSet&) = delete;
  void stage(const std::filesystem::path& path, std::string_view contents);
  void commit();

 private:
  struct Staged;
  struct State;
  std::unique_ptr<State> state_;
};

void write_file_atomic(const std::filesystem::path& path, std::string_view contents);
// Writes each (path, contents) as write_file_atomic does, all or none (an AtomicFileSet): every
// temp file is written and fsynced (each on a thread of its own) before any is renamed, and each
// directory is fsynced once after the renames. Throws IoError, leaving no file replaced, when a
// temp cannot be written.
void write_files_atomic(
    const std::vector<std::pair<std::filesystem::path, std::string_view>>& files);
std::string read_file(const std::filesystem::path& path);  // throws IoError

// CRC-32 (zlib polynomial); pass the previous value to continue a running CRC.
uint32_t crc32(const void* data, size_t bytes, uint32_t crc = 0);

}  // namespace ft

// atomic_file.cpp: crash-safe file replacement (temp, fsync, rename, fsync dir), reads and CRC32.
#include "ft/core/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>

#include "ft/core/error.h"

namespace ft {
namespace {

[[noreturn]] void throw_io(const std::string& what, const std::filesystem::path& path, int err) {
  throw IoError(fmt::format("{} '{}': {}", what, path.string(), std::strerror(err)));
}

void fsync_or_throw(int fd, const std::filesystem::path& path) {
  while (::fsync(fd) != 0) {
    if (errno != EINTR) throw_io("cannot fsync", path, errno);
  }
}

// Makes a rename durable. Some file systems refuse fsync on a directory
// (EINVAL/EROFS); the rename itself has happened then, so only real I/O errors throw.
void fsync_dir(const std::filesystem::path& dir) {
  const std::filesystem::path d = dir.empty() ? std::filesystem::path(".") : dir;
  int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_io("cannot open directory", d, errno);
  int rc;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != EROFS) throw_io("cannot fsync directory", d, err);
}

}  // namespace

size_t remove_stale_temp_files(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const std::string prefix = path.filename().string() + ".tmp.";
  size_t removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid_text = name.substr(prefix.size());
    if (pid_text.find_first_not_of("0123456789") != std::string::npos || pid_text.size() > 9) continue;
    const long pid = std::stol(pid_text);
    // A writer that is still running (or any process that now has its pid) keeps its file.
    if (pid <= 0 || pid == static_cast<long>(::getpid()) || ::kill(pid, 0) == 0 || errno != ESRCH)
      continue;
    std::error_code rm;
    if (fs::remove(it->path(), rm)) ++removed;
  }
  return removed;
}

AtomicFileWriter::AtomicFileWriter(std::filesystem::path path) : path_(std::move(path)) {
  remove_stale_temp_files(path_);  // left by a writer killed before commit (kill -9)
  tmp_ = path_;
  tmp_ += fmt::format(".tmp.{}", static_cast<long>(::getpid()));
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_io("cannot create", tmp_, errno);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  if (fd_ < 0) {
    throw IoError(
        fmt::format("cannot write '{}': writer is already committed or failed", tmp_.string()));
  }
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const size_t chunk = std::min<size_t>(bytes, size_t{1} << 30);
    ssize_t n = ::write(fd_, p, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_io("cannot write", tmp_, errno);
    }
    if (n == 0) throw IoError(fmt::format("cannot write '{}': write returned 0", tmp_.string()));
    p += n;
    bytes -= static_cast<size_t>(n);
    written_ += static_cast<size_t>(n);
  }
}

void AtomicFileWriter::sync() {
  if (fd_ < 0) {
    throw IoError(fmt::format("cannot sync '{}': writer is committed or failed", tmp_.string()));
  }
  fsync_or_throw(fd_, tmp_);
  synced_ = true;
}

void AtomicFileWriter::commit(bool sync_dir) {
  if (committed_) return;
  if (fd_ < 0) {
    throw IoError(fmt::format("cannot commit '{}': writer failed earlier", path_.string()));
  }
  if (!synced_) fsync_or_throw(fd_, tmp_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw_io("cannot close", tmp_, errno);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    throw IoError(fmt::format("cannot rename '{}' to '{}': {}", tmp_.string(), path_.string(),
                              std::strerror(errno)));
  }
  committed_ = true;
  if (sync_dir) fsync_dir(path_.parent_path());
}

void write_file_atomic(const std::filesystem::path& path, std::string_view contents) {
  AtomicFileWriter w(path);
  w.write(contents.data(), contents.size());
  w.commit();
}

struct AtomicFileSet::Staged {
  std::filesystem::path path;
  std::unique_ptr<AtomicFileWriter> writer;  // set by the thread when the file is written
  std::exception_ptr error;
  std::thread thread;
};

struct AtomicFileSet::State {
  std::mutex mu;
  std::vector<std::unique_ptr<Staged>> files;
  bool committed = false;
  void join() {
    for (auto& f : files)
      if (f->thread.joinable()) f->thread.join();
  }
};

AtomicFileSet::AtomicFileSet() : state_(std::make_unique<State>()) {}

AtomicFileSet::~AtomicFileSet() { state_->join(); }  // the writers then remove their temps

void AtomicFileSet::stage(const std::filesystem::path& path, std::string_view contents) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->committed) throw IoError(fmt::format("cannot stage '{}': committed", path.string()));
  auto f = std::make_unique<Staged>();
  f->path = path;
  Staged* raw = f.get();
  state_->files.push_back(std::move(f));
  try {
    raw->thread = std::thread([raw, contents] {
      try {
        auto w = std::make_unique<AtomicFileWriter>(raw->path);
        w->write(contents.data(), contents.size());
        w->sync();
        raw->writer = std::move(w);
      } catch (...) {
        raw->error = std::current_exception();
      }
    });
  } catch (...) {  // no thread to be had: this file is not staged
    state_->files.pop_back();
    throw;
  }
}

void AtomicFileSet::commit() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->join();
  for (const auto& f : state_->files)
    if (f->error) std::rethrow_exception(f->error);
  state_->committed = true;
  std::vector<std::filesystem::path> dirs;
  for (const auto& f : state_->files) {
    f->writer->commit(/*sync_dir=*/false);
    const std::filesystem::path dir = f->path.parent_path();
    if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
  }
  for (const std::filesystem::path& dir : dirs) fsync_dir(dir);
}

void write_files_atomic(
    const std::vector<std::pair<std::filesystem::path, std::string_view>>& files) {
  AtomicFileSet set;
  for (const auto& [path, contents] : files) set.stage(path, contents);
  set.commit();
}

std::string read_file(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_io("cannot open", path, errno);
  std::string out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    out.reserve(static_cast<size_t>(st.st_size));
  }
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw_io("cannot read", path, err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

uint32_t crc32(const void* data, size_t bytes, uint32_t crc) {
  const Bytef* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  while (bytes > 0) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(bytes, std::numeric_limits<uInt>::max()));
    c = ::crc32(c, p, chunk);
    p += chunk;
    bytes -= chunk;
  }
  return static_cast<uint32_t>(c);
}

}  // namespace ft

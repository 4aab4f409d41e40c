// documents.cpp: streaming document reader over text, fortune, JSONL (plain or gzip) and directories.
#include "ft/trainer/documents.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <system_error>

#include "ft/core/error.h"

namespace ft::trainer::data {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Reads a file (plain or gzip, zlib detects which) line by line through a fixed buffer, so
// memory stays bounded by the longest line.
class LineReader {
 public:
  explicit LineReader(const fs::path& path) : path_(path) {
    file_ = gzopen(path.c_str(), "rb");
    if (!file_) {
      throw IoError(fmt::format("cannot open '{}': {}", path.string(), std::strerror(errno)));
    }
    gzbuffer(file_, 1 << 18);
    buf_.resize(1 << 18);
  }
  ~LineReader() {
    if (file_) gzclose(file_);
  }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Byte offset (in the decompressed file) of the line `next` returned last.
  uint64_t offset() const { return offset_; }

  // Next line without its '\n' (and a trailing '\r'); false at end of file.
  bool next(std::string_view& line) {
    for (;;) {
      const char* nl = static_cast<const char*>(std::memchr(buf_.data() + begin_, '\n', end_ - begin_));
      offset_ = base_ + begin_;
      if (nl) {
        const size_t len = static_cast<size_t>(nl - (buf_.data() + begin_));
        line = std::string_view(buf_.data() + begin_, len);
        begin_ += len + 1;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        return true;
      }
      if (eof_) {
        if (begin_ == end_) return false;
        line = std::string_view(buf_.data() + begin_, end_ - begin_);
        begin_ = end_;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        return true;
      }
      // Move the partial line to the front, grow if one line fills the buffer, refill.
      if (begin_ > 0) {
        std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
        base_ += begin_;
        end_ -= begin_;
        begin_ = 0;
      }
      if (end_ == buf_.size()) buf_.resize(buf_.size() * 2);
      const int got = gzread(file_, buf_.data() + end_, static_cast<unsigned>(buf_.size() - end_));
      if (got < 0) {
        int errnum = 0;
        const char* msg = gzerror(file_, &errnum);
        throw IoError(fmt::format("read error in '{}': {}", path_.string(), msg ? msg : "?"));
      }
      if (got == 0) eof_ = true;
      end_ += static_cast<size_t>(got);
    }
  }

 private:
  fs::path path_;
  gzFile file_ = nullptr;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;
  uint64_t base_ = 0;    // offset of buf_[0] in the file
  uint64_t offset_ = 0;  // of the line returned last
  bool eof_ = false;
};

bool is_blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\f' || c == '\v'; });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

using Callback = std::function<bool(std::string_view, const DocumentOrigin&)>;

bool read_text_file(const fs::path& path, const Callback& fn, const DocumentReadOptions& options) {
  LineReader reader(path);
  std::string doc;
  DocumentOrigin origin{path.string(), 0};
  uint64_t line_no = 0, doc_line = 0, doc_offset = 0;
  auto flush = [&]() -> bool {
    const bool empty = trim(doc).empty();
    const bool in_range = doc_offset >= options.range_begin && doc_offset < options.range_end;
    bool go_on = true;
    if (in_range && !(empty && options.skip_empty) && (doc_line != 0 || !doc.empty())) {
      origin.line = doc_line;
      go_on = fn(doc, origin);
    }
    doc.clear();
    doc_line = 0;
    return go_on;
  };
  std::string_view line;
  while (reader.next(line)) {
    ++line_no;
    if (is_blank(line) || line == "%") {
      if (!doc.empty() && !flush()) return false;
      continue;
    }
    if (doc.empty()) {
      doc_line = line_no;
      doc_offset = reader.offset();
      if (doc_offset >= options.range_end) return true;  // past the range: this file is done
    } else {
      doc += '\n';
    }
    doc.append(line);
  }
  return doc.empty() || flush();
}

bool read_jsonl_file(const fs::path& path, const Callback& fn, const DocumentReadOptions& options) {
  LineReader reader(path);
  DocumentOrigin origin{path.string(), 0};
  std::string_view line;
  uint64_t line_no = 0;
  while (reader.next(line)) {
    ++line_no;
    if (reader.offset() >= options.range_end) return true;  // past the range: this file is done
    if (is_blank(line) || reader.offset() < options.range_begin) continue;
    origin.line = line_no;
    if (options.raw_jsonl) {
      if (!fn(line, origin)) return false;
      continue;
    }
    const std::string text = decode_jsonl_document(line, origin, options.text_field);
    if (options.skip_empty && trim(text).empty()) continue;
    if (!fn(text, origin)) return false;
  }
  return true;
}

bool skipped_in_directory(const fs::path& p) {
  const std::string name = p.filename().string();
  return name.empty() || name[0] == '.' || ends_with(name, ".bin");
}

}  // namespace

std::string decode_jsonl_document(std::string_view line, const DocumentOrigin& origin,
                                  const std::string& text_field) {
  return decode_jsonl_document(line, origin, text_field, "", nullptr);
}

std::string decode_jsonl_document(std::string_view line, const DocumentOrigin& origin,
                                  const std::string& text_field, const std::string& id_field,
                                  std::string* id) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    throw FormatError(fmt::format("{}:{}: not valid JSON (byte {} of the line): {}", origin.file,
                                  origin.line, e.byte, e.what()));
  }
  if (!j.is_object()) {
    throw FormatError(fmt::format("{}:{}: expected a JSON object per line", origin.file,
                                  origin.line));
  }
  const auto it = j.find(text_field);
  if (it == j.end() || !it->is_string()) {
    throw FormatError(
        fmt::format("{}:{}: no string field \"{}\"", origin.file, origin.line, text_field));
  }
  if (id != nullptr) {
    id->clear();
    const auto k = j.find(id_field);
    if (k != j.end() && !k->is_null()) *id = k->is_string() ? k->get<std::string>() : k->dump();
  }
  return it->get<std::string>();
}

bool is_jsonl_path(const fs::path& path) {
  const std::string name = path.filename().string();
  return ends_with(name, ".jsonl") || ends_with(name, ".jsonl.gz") || ends_with(name, ".ndjson") ||
         ends_with(name, ".ndjson.gz");
}

std::vector<fs::path> list_document_files(const std::vector<fs::path>& paths) {
  std::vector<fs::path> files;
  for (const fs::path& p : paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    if (ec || !fs::exists(st)) throw ConfigError(fmt::format("no such file or directory: '{}'", p.string()));
    if (fs::is_directory(st)) {
      std::vector<fs::path> found;
      for (auto it = fs::recursive_directory_iterator(p, fs::directory_options::skip_permission_denied, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (it->is_directory() && !name.empty() && name[0] == '.') {
          it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file() && !skipped_in_directory(it->path())) found.push_back(it->path());
      }
      if (ec) throw IoError(fmt::format("cannot list '{}': {}", p.string(), ec.message()));
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(p);
    }
  }
  return files;
}

void for_each_document(const std::vector<fs::path>& paths, const Callback& fn,
                       const DocumentReadOptions& options) {
  for (const fs::path& file : list_document_files(paths)) {
    const bool go_on = is_jsonl_path(file) ? read_jsonl_file(file, fn, options)
                                           : read_text_file(file, fn, options);
    if (!go_on) return;
  }
}

}  // namespace ft::trainer::data

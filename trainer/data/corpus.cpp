// corpus.cpp: the cached KJV corpus and --data resolution (text, one shard, a shard directory).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/trainer/data.h"

namespace ft::trainer::data {
namespace {

namespace fs = std::filesystem;

constexpr const char* kBibleRange = "Gen1:1-Rev22:21";
constexpr int kValEvery = 20;  // paragraph i goes to validation when i % 20 == 19

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

// Whether an executable named `name` is on $PATH.
bool on_path(const std::string& name) {
  std::string path = env("PATH");
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const fs::path dir =
        end == start ? fs::path(".") : fs::path(std::string_view(path).substr(start, end - start));
    if (::access((dir / name).c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

// "Ge1:1" -> "Ge1" (book + chapter); empty if `tok` is not a verse reference.
std::string chapter_key(std::string_view tok) {
  const size_t colon = tok.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 >= tok.size()) return {};
  if (!std::isdigit(static_cast<unsigned char>(tok[colon - 1]))) return {};
  for (size_t i = colon + 1; i < tok.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(tok[i]))) return {};
  }
  return std::string(tok.substr(0, colon));
}

// Verse lines "Ge1:1 In the beginning ..." -> text without references, a
// blank line between chapters.
std::string strip_references(const std::string& raw) {
  std::string out;
  out.reserve(raw.size());
  std::string chapter;
  size_t pos = 0;
  while (pos < raw.size()) {
    size_t eol = raw.find('\n', pos);
    if (eol == std::string::npos) eol = raw.size();
    std::string_view line(raw.data() + pos, eol - pos);
    pos = eol + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    const std::string key = chapter_key(line.substr(0, sp));
    if (!key.empty()) {
      line = sp == std::string_view::npos ? std::string_view() : line.substr(sp + 1);
      while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
      if (key != chapter && !chapter.empty()) out += '\n';
      chapter = key;
    }
    if (line.empty()) continue;
    out.append(line);
    out += '\n';
  }
  return out;
}

std::string run_bible() {
  const std::string install =
      "install the Debian package bible-kjv (sudo apt-get install bible-kjv) or pass "
      "--data with a text file or llm.c shards";
  if (!on_path("bible")) {
    throw IoError("the KJV corpus needs the `bible` program, which is not on PATH: " + install);
  }
  const std::string cmd = fmt::format("bible -f \"{}\" 2>/dev/null", kBibleRange);
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    throw IoError(fmt::format("cannot run `{}`: {}; {}", cmd, std::strerror(errno), install));
  }
  std::string raw;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) raw.append(buf, n);
  const int status = ::pclose(pipe);
  if (raw.empty()) {
    throw IoError(
        fmt::format("`{}` produced no output (exit status {}); {}", cmd, status, install));
  }
  return raw;
}

std::string human_count(size_t n) {
  if (n < 1000) return fmt::format("{}", n);
  if (n < 1000000) return fmt::format("{:.1f}K", n / 1e3);
  if (n < 1000000000) return fmt::format("{:.1f}M", n / 1e6);
  return fmt::format("{:.2f}B", n / 1e9);
}

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

// Splits text into paragraphs at runs of blank lines; each keeps its lines
// and ends with "\n\n" so the concatenation reads like the source.
std::vector<std::string> split_paragraphs(const std::string& text) {
  std::vector<std::string> paras;
  std::string cur;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    if (is_blank(line)) {
      if (!cur.empty()) {
        cur += '\n';
        paras.push_back(std::move(cur));
      }
      cur.clear();
    } else {
      cur.append(line);
      cur += '\n';
    }
  }
  if (!cur.empty()) {
    cur += '\n';
    paras.push_back(std::move(cur));
  }
  return paras;
}

TrainValSplit split_by_position(std::shared_ptr<TokenSource> all) {
  const size_t n = all->size();
  const size_t n_train = n - n / 20;  // first 95% train, last 5% validation
  TrainValSplit s;
  s.train = make_slice_source(all, 0, n_train);
  s.val = make_slice_source(all, n_train, n - n_train);
  return s;
}

TrainValSplit load_text(const fs::path& path, const std::string& label,
                        const Tokenizer& tokenizer) {
  const std::string text = read_file(path);
  const std::vector<std::string> paras = split_paragraphs(text);
  if (paras.empty()) throw ConfigError(fmt::format("--data '{}': no text", path.string()));
  TrainValSplit s;
  std::string how;
  if (paras.size() >= static_cast<size_t>(kValEvery)) {
    std::vector<int32_t> train, val;
    for (size_t i = 0; i < paras.size(); ++i) {
      std::vector<int32_t> toks = tokenizer.encode(paras[i]);
      std::vector<int32_t>& dst = i % kValEvery == kValEvery - 1 ? val : train;
      dst.insert(dst.end(), toks.begin(), toks.end());
    }
    s.train = make_vector_source(std::move(train));
    s.val = make_vector_source(std::move(val));
    how = fmt::format("{} paragraphs, every {}th to val", paras.size(), kValEvery);
  } else {
    std::string joined;
    for (const std::string& p : paras) joined += p;
    s = split_by_position(make_vector_source(tokenizer.encode(joined)));
    how = fmt::format("{} paragraphs, last 5% to val", paras.size());
  }
  s.description = fmt::format("{} ({}): {} train / {} val tokens ({})", label, tokenizer.name(),
                              human_count(s.train->size()), human_count(s.val->size()), how);
  return s;
}

TrainValSplit load_shard_dir(const fs::path& dir) {
  std::vector<fs::path> train_files, val_files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().extension() != ".bin") continue;
    const std::string name = e.path().filename().string();
    (name.find("val") != std::string::npos ? val_files : train_files).push_back(e.path());
  }
  std::sort(train_files.begin(), train_files.end());
  std::sort(val_files.begin(), val_files.end());
  if (train_files.empty()) {
    throw ConfigError(
        fmt::format("--data '{}': no training shards (*.bin without 'val' in the "
                    "name)",
                    dir.string()));
  }
  auto open_all = [](const std::vector<fs::path>& files) {
    std::vector<std::shared_ptr<TokenSource>> parts;
    for (const fs::path& f : files) parts.push_back(open_llmc_shard(f));
    return make_concat_source(std::move(parts));
  };
  TrainValSplit s;
  std::string how;
  if (val_files.empty()) {
    s = split_by_position(open_all(train_files));
    how = fmt::format("{} shards, no 'val' shard so last 5% to val", train_files.size());
  } else {
    s.train = open_all(train_files);
    s.val = open_all(val_files);
    how = fmt::format("{} train / {} val shards", train_files.size(), val_files.size());
  }
  s.description = fmt::format("{} (llm.c shards): {} train / {} val tokens ({})", dir.string(),
                              human_count(s.train->size()), human_count(s.val->size()), how);
  return s;
}

}  // namespace

fs::path cache_dir() {
  fs::path dir;
  if (std::string v = env("FT_CACHE_DIR"); !v.empty()) {
    dir = v;
  } else if (std::string x = env("XDG_CACHE_HOME"); !x.empty()) {
    dir = fs::path(x) / "ft";
  } else if (std::string h = env("HOME"); !h.empty()) {
    dir = fs::path(h) / ".cache" / "ft";
  } else {
    throw IoError("no cache directory: set FT_CACHE_DIR, XDG_CACHE_HOME or HOME");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw IoError(
        fmt::format("cannot create cache directory '{}': {}", dir.string(), ec.message()));
  }
  return dir;
}

fs::path kjv_text_path() {
  const fs::path path = cache_dir() / "kjv.txt";
  std::error_code ec;
  if (fs::is_regular_file(path, ec) && fs::file_size(path, ec) > 0 && !ec) return path;
  const std::string text = strip_references(run_bible());
  if (text.empty()) {
    throw IoError("`bible` output held no verses; reinstall the Debian package bible-kjv");
  }
  write_file_atomic(path, text);
  return path;
}

TrainValSplit load_data(const std::string& spec, const Tokenizer& tokenizer) {
  if (spec == "kjv") return load_text(kjv_text_path(), "kjv", tokenizer);
  const fs::path path(spec);
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st)) return load_shard_dir(path);
  if (fs::is_regular_file(st)) {
    if (path.extension() == ".bin") {
      TrainValSplit s = split_by_position(open_llmc_shard(path));
      s.description = fmt::format("{} (llm.c shard): {} train / {} val tokens (95/5 by position)",
                                  spec, human_count(s.train->size()), human_count(s.val->size()));
      return s;
    }
    return load_text(path, path.filename().string(), tokenizer);
  }
  throw ConfigError(
      fmt::format("--data '{}': no such file or directory (expected 'kjv', a text "
                  "file, an llm.c .bin shard or a directory of shards)",
                  spec));
}

}  // namespace ft::trainer::data

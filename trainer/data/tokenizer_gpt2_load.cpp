// tokenizer_gpt2_load.cpp: reads encoder.json/vocab.bpe/tokenizer.json (plain or gzip);
// make_tokenizer.
#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <iterator>
#include <nlohmann/json.hpp>
#include <system_error>

#include "ft/core/error.h"
#include "ft/trainer/tokenizer_gpt2.h"

namespace ft::trainer::data {
namespace {

namespace fs = std::filesystem;

// The whole file, decompressed if it is gzip (zlib's gzread passes plain files through).
std::string read_maybe_gz(const fs::path& path, const char* what) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw ConfigError(fmt::format("{} '{}' not found", what, path.string()));
  }
  if (fs::is_directory(path, ec)) {
    throw ConfigError(fmt::format("{} '{}' is a directory, expected a file", what, path.string()));
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw IoError(fmt::format("cannot open {} '{}'", what, path.string()));
  std::string out;
  char buf[1 << 16];
  while (true) {
    const int n = gzread(f, buf, sizeof(buf));
    if (n < 0) {
      int errnum = 0;
      const std::string msg = gzerror(f, &errnum);
      gzclose(f);
      throw FormatError(fmt::format("{} '{}': cannot decompress after {} bytes: {}", what,
                                    path.string(), out.size(), msg));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  gzclose(f);
  return out;
}

// Reverses GPT-2's byte-to-unicode mapping: a vocabulary string back to raw bytes.
class ByteDecoder {
 public:
  ByteDecoder() {
    std::fill(std::begin(to_byte_), std::end(to_byte_), int16_t{-1});
    for (int b = 0; b < 256; ++b) {
      to_byte_[gpt2_byte_to_unicode(static_cast<uint8_t>(b))] = static_cast<int16_t>(b);
    }
  }
  // Returns false if `s` is not UTF-8 over the 256-character alphabet.
  bool decode(const std::string& s, std::string& out) const {
    out.clear();
    for (size_t i = 0; i < s.size();) {
      const auto c = static_cast<unsigned char>(s[i]);
      uint32_t cp;
      if (c < 0x80) {
        cp = c;
        i += 1;
      } else if ((c & 0xe0) == 0xc0 && i + 1 < s.size()) {
        cp = ((c & 0x1fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3fu);
        i += 2;
      } else {
        return false;  // the alphabet lies below U+0800
      }
      if (cp >= kSize || to_byte_[cp] < 0) return false;
      out.push_back(static_cast<char>(to_byte_[cp]));
    }
    return true;
  }

 private:
  static constexpr uint32_t kSize = 512;
  int16_t to_byte_[kSize];
};

const ByteDecoder& byte_decoder() {
  static const ByteDecoder d;
  return d;
}

nlohmann::json parse_json(const std::string& text, const fs::path& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw FormatError(
        fmt::format("'{}': not valid JSON at byte {}: {}", path.string(), e.byte, e.what()));
  }
}

std::vector<std::pair<std::string, int32_t>> vocab_from_json(const nlohmann::json& j,
                                                             const fs::path& path,
                                                             const char* where) {
  if (!j.is_object()) {
    throw FormatError(
        fmt::format("'{}': {} must be a JSON object of token -> id", path.string(), where));
  }
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(j.size());
  std::string bytes;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() > INT32_MAX) {
      throw FormatError(fmt::format("'{}': {}: token \"{}\" has id {}, expected an integer >= 0",
                                    path.string(), where, key, value.dump()));
    }
    if (key == Gpt2Tokenizer::kEndOfTextText) {
      bytes = key;
    } else if (!byte_decoder().decode(key, bytes)) {
      throw FormatError(
          fmt::format("'{}': {}: token \"{}\" (id {}) has a character outside "
                      "GPT-2's byte-to-unicode alphabet",
                      path.string(), where, key, value.get<int64_t>()));
    }
    vocab.emplace_back(bytes, static_cast<int32_t>(value.get<int64_t>()));
  }
  return vocab;
}

std::pair<std::string, std::string> merge_parts(const std::string& a, const std::string& b,
                                                const fs::path& path, const std::string& where) {
  std::pair<std::string, std::string> out;
  if (!byte_decoder().decode(a, out.first) || !byte_decoder().decode(b, out.second) ||
      out.first.empty() || out.second.empty()) {
    throw FormatError(
        fmt::format("'{}': {}: merge \"{} {}\" has a character outside GPT-2's "
                    "byte-to-unicode alphabet",
                    path.string(), where, a, b));
  }
  return out;
}

}  // namespace

std::shared_ptr<Gpt2Tokenizer> Gpt2Tokenizer::from_files(const fs::path& encoder_json,
                                                         const fs::path& vocab_bpe) {
  const std::string enc_text = read_maybe_gz(encoder_json, "GPT-2 vocabulary (encoder.json)");
  const std::string bpe_text = read_maybe_gz(vocab_bpe, "GPT-2 merges (vocab.bpe)");
  const auto vocab = vocab_from_json(parse_json(enc_text, encoder_json), encoder_json, "top level");
  std::vector<std::pair<std::string, std::string>> merges;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < bpe_text.size()) {
    size_t eol = bpe_text.find('\n', pos);
    if (eol == std::string::npos) eol = bpe_text.size();
    std::string line = bpe_text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string::npos) {
      throw FormatError(
          fmt::format("'{}' line {}: expected two tokens separated by one space, "
                      "got \"{}\"",
                      vocab_bpe.string(), line_no, line));
    }
    merges.push_back(merge_parts(line.substr(0, sp), line.substr(sp + 1), vocab_bpe,
                                 fmt::format("line {}", line_no)));
  }
  return std::make_shared<Gpt2Tokenizer>(
      vocab, merges,
      fmt::format("GPT-2 tokenizer from '{}' and '{}'", encoder_json.string(), vocab_bpe.string()));
}

std::shared_ptr<Gpt2Tokenizer> Gpt2Tokenizer::from_tokenizer_json(const fs::path& path) {
  const nlohmann::json j = parse_json(read_maybe_gz(path, "tokenizer.json"), path);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) {
    throw FormatError(
        fmt::format("'{}': no \"model\" object (expected a HuggingFace "
                    "tokenizer.json)",
                    path.string()));
  }
  const auto& model = j["model"];
  if (model.contains("type") && model["type"] != "BPE") {
    throw FormatError(fmt::format("'{}': model.type is {}, only \"BPE\" is supported",
                                  path.string(), model["type"].dump()));
  }
  if (!model.contains("vocab") || !model.contains("merges") || !model["merges"].is_array()) {
    throw FormatError(
        fmt::format("'{}': model needs \"vocab\" (object) and \"merges\" (array)", path.string()));
  }
  auto vocab = vocab_from_json(model["vocab"], path, "model.vocab");
  // Special tokens may live only in added_tokens.
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& t : j["added_tokens"]) {
      if (t.is_object() && t.value("content", "") == kEndOfTextText && t.contains("id") &&
          t["id"].is_number_integer()) {
        const auto id = t["id"].get<int32_t>();
        bool have = false;
        for (const auto& v : vocab) have = have || v.second == id;
        if (!have) vocab.emplace_back(kEndOfTextText, id);
      }
    }
  }
  std::vector<std::pair<std::string, std::string>> merges;
  const auto& m = model["merges"];
  merges.reserve(m.size());
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string where = fmt::format("model.merges[{}]", i);
    if (m[i].is_string()) {
      const std::string s = m[i].get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        throw FormatError(
            fmt::format("'{}': {}: expected \"a b\", got \"{}\"", path.string(), where, s));
      }
      merges.push_back(merge_parts(s.substr(0, sp), s.substr(sp + 1), path, where));
    } else if (m[i].is_array() && m[i].size() == 2 && m[i][0].is_string() && m[i][1].is_string()) {
      merges.push_back(
          merge_parts(m[i][0].get<std::string>(), m[i][1].get<std::string>(), path, where));
    } else {
      throw FormatError(fmt::format("'{}': {}: expected \"a b\" or [\"a\", \"b\"], got {}",
                                    path.string(), where, m[i].dump()));
    }
  }
  return std::make_shared<Gpt2Tokenizer>(vocab, merges,
                                         fmt::format("GPT-2 tokenizer from '{}'", path.string()));
}

std::shared_ptr<const Tokenizer> make_tokenizer(const std::string& name,
                                                const std::string& vocab_or_tokenizer_json,
                                                const std::string& merges) {
  if (name == "byte") {
    if (!vocab_or_tokenizer_json.empty() || !merges.empty()) {
      throw ConfigError("the byte tokenizer takes no vocabulary or merges file");
    }
    return std::make_shared<ByteTokenizer>();
  }
  if (name == "gpt2") {
    if (vocab_or_tokenizer_json.empty()) {
      throw ConfigError(
          "the gpt2 tokenizer needs encoder.json and vocab.bpe (--vocab, --merges) "
          "or a tokenizer.json (--tokenizer-json)");
    }
    if (merges.empty()) return Gpt2Tokenizer::from_tokenizer_json(vocab_or_tokenizer_json);
    return Gpt2Tokenizer::from_files(vocab_or_tokenizer_json, merges);
  }
  throw ConfigError(fmt::format("unknown tokenizer '{}' (expected byte or gpt2)", name));
}

}  // namespace ft::trainer::data

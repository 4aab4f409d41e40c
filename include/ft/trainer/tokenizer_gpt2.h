// tokenizer_gpt2.h: GPT-2 byte-level BPE tokenizer (encoder.json + vocab.bpe, or tokenizer.json).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ft/trainer/data.h"

namespace ft::trainer::data {

// GPT-2's tokenizer, exactly: text is split by the pre-tokenisation regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (letters/numbers are Unicode general categories L*/N*, \s is Unicode White_Space, all from
// ICU), each piece's UTF-8 bytes go through byte-pair merges in rank order, and ids come from
// the vocabulary. Bytes that are not well-formed UTF-8 are kept: each such byte is a symbol of
// its own that is neither letter, number nor space, and is merged as that byte, so
// decode(encode(b)) == b for any bytes b. encode() is thread-safe; each thread keeps a
// bounded cache of the pieces it has seen.
class Gpt2Tokenizer : public Tokenizer {
 public:
  static constexpr const char* kEndOfTextText = "<|endoftext|>";

  // `vocab`: every token's bytes keyed by id-less string in GPT-2's byte-to-unicode alphabet,
  // as in encoder.json; `merges`: pairs in rank order. `origin` names the files for errors.
  // Throws FormatError if a byte has no token, a merge's parts or result are not in the
  // vocabulary, or ids repeat.
  Gpt2Tokenizer(const std::vector<std::pair<std::string, int32_t>>& vocab,
                const std::vector<std::pair<std::string, std::string>>& merges,
                const std::string& origin);

  // encoder.json + vocab.bpe, each plain or gzip-compressed.
  // Throws ConfigError for a missing file, FormatError (file, line/offset) for a malformed one.
  static std::shared_ptr<Gpt2Tokenizer> from_files(const std::filesystem::path& encoder_json,
                                                   const std::filesystem::path& vocab_bpe);
  // A HuggingFace tokenizer.json: model.vocab and model.merges ("a b" strings or ["a","b"]).
  static std::shared_ptr<Gpt2Tokenizer> from_tokenizer_json(const std::filesystem::path& path);

  int vocab_size() const override { return static_cast<int>(id_to_bytes_.size()); }
  // Plain text: "<|endoftext|>" in the text is encoded as ordinary characters (as OpenAI's
  // encoder.py and tiktoken's encode_ordinary do), so data cannot forge document boundaries.
  std::vector<int32_t> encode(std::string_view text) const override;
  // Appends the encoding of `text` to `out`.
  void encode_append(std::string_view text, std::vector<int32_t>& out) const;
  // Like encode(), but each literal "<|endoftext|>" becomes end_of_text().
  std::vector<int32_t> encode_with_special(std::string_view text) const;
  // Ids without a token decode to U+FFFD; end_of_text() decodes to "<|endoftext|>".
  std::string decode(const int32_t* tokens, size_t n) const override;
  std::string name() const override { return "gpt2"; }
  // The id of "<|endoftext|>" (50256 for GPT-2), or -1 if the vocabulary has none.
  int32_t end_of_text() const { return end_of_text_; }
  size_t num_merges() const { return num_merges_; }

 private:
  // Rank of merging (a, b) and its result, or UINT32_MAX if there is no such merge.
  uint32_t merge_rank(int32_t a, int32_t b, int32_t* merged) const;
  // Short pieces: repeated scans (fast for words). Long pieces: a heap of candidate pairs,
  // O(n log n), for runs such as a megabyte of letters without a space. Same result.
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void bpe_long(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<std::string> id_to_bytes_;  // token bytes by id ("" = no token)
  int32_t byte_id_[256];                  // the token of each single byte
  // (left id << 32 | right id) -> (rank << 32 | merged id)
  std::unordered_map<uint64_t, uint64_t> merges_;
  size_t num_merges_ = 0;
  int32_t end_of_text_ = -1;
  uint64_t instance_id_;  // keys the per-thread piece cache
};

// Splits `text` into GPT-2 pre-tokens (the regex above), calling fn(piece) for each in order;
// the pieces are contiguous and cover `text` exactly.
void gpt2_pretokenize(std::string_view text, const std::function<void(std::string_view)>& fn);

// GPT-2's byte -> unicode code point table (printable bytes map to themselves).
uint32_t gpt2_byte_to_unicode(uint8_t byte);

// "byte": ByteTokenizer (other arguments must be empty). "gpt2": with `merges` non-empty,
// `vocab_or_tokenizer_json` is encoder.json and `merges` vocab.bpe; with `merges` empty it is a
// tokenizer.json. Throws ConfigError for an unknown name or missing files.
std::shared_ptr<const Tokenizer> make_tokenizer(const std::string& name,
                                                const std::string& vocab_or_tokenizer_json,
                                                const std::string& merges);

}  // namespace ft::trainer::data

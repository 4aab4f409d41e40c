// tokenizer.cpp: the byte-level tokenizer (one token per byte, vocabulary 256).
#include "ft/trainer/data.h"

namespace ft::trainer::data {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    out[i] = static_cast<unsigned char>(text[i]);
  }
  return out;
}

std::string ByteTokenizer::decode(const int32_t* tokens, size_t n) const {
  std::string out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] >= 0 && tokens[i] < 256) {
      out.push_back(static_cast<char>(static_cast<unsigned char>(tokens[i])));
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
    }
  }
  return out;
}

}  // namespace ft::trainer::data

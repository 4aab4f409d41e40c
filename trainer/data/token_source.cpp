// token_source.cpp: in-memory, concatenated and sliced TokenSources.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "ft/core/error.h"
#include "ft/trainer/data.h"

namespace ft::trainer::data {
namespace {

class VectorSource : public TokenSource {
 public:
  explicit VectorSource(std::vector<int32_t> tokens) : tokens_(std::move(tokens)) {
    for (int32_t t : tokens_) max_ = std::max(max_, static_cast<int>(t));
  }
  size_t size() const override { return tokens_.size(); }
  void read(size_t pos, size_t n, int32_t* out) const override {
    if (pos > tokens_.size() || n > tokens_.size() - pos) {
      throw Error(
          fmt::format("token read [{}, {}) past the end ({})", pos, pos + n, tokens_.size()));
    }
    if (n != 0) std::memcpy(out, tokens_.data() + pos, n * sizeof(int32_t));
  }
  int max_token() const override { return max_; }

 private:
  std::vector<int32_t> tokens_;
  int max_ = -1;
};

class ConcatSource : public TokenSource {
 public:
  explicit ConcatSource(std::vector<std::shared_ptr<TokenSource>> parts)
      : parts_(std::move(parts)) {
    starts_.reserve(parts_.size() + 1);
    size_t total = 0;
    for (const auto& p : parts_) {
      if (!p) throw ConfigError("make_concat_source: null part");
      starts_.push_back(total);
      total += p->size();
      max_ = std::max(max_, p->max_token());
    }
    starts_.push_back(total);
  }
  size_t size() const override { return starts_.back(); }
  void read(size_t pos, size_t n, int32_t* out) const override {
    if (pos > size() || n > size() - pos) {
      throw Error(fmt::format("token read [{}, {}) past the end ({})", pos, pos + n, size()));
    }
    // The first part whose range contains pos.
    size_t i = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), pos) -
                                   starts_.begin()) -
               1;
    while (n > 0) {
      const size_t local = pos - starts_[i];
      const size_t take = std::min(n, parts_[i]->size() - local);
      if (take > 0) parts_[i]->read(local, take, out);
      out += take;
      pos += take;
      n -= take;
      ++i;
    }
  }
  int max_token() const override { return max_; }

 private:
  std::vector<std::shared_ptr<TokenSource>> parts_;
  std::vector<size_t> starts_;
  int max_ = -1;
};

class SliceSource : public TokenSource {
 public:
  SliceSource(std::shared_ptr<TokenSource> base, size_t begin, size_t n)
      : base_(std::move(base)), begin_(begin), n_(n) {}
  size_t size() const override { return n_; }
  void read(size_t pos, size_t n, int32_t* out) const override {
    if (pos > n_ || n > n_ - pos) {
      throw Error(fmt::format("token read [{}, {}) past the end ({})", pos, pos + n, n_));
    }
    base_->read(begin_ + pos, n, out);
  }
  // The base's maximum: an upper bound, exact enough for vocabulary checks.
  int max_token() const override { return base_->max_token(); }

 private:
  std::shared_ptr<TokenSource> base_;
  size_t begin_, n_;
};

}  // namespace

std::shared_ptr<TokenSource> make_vector_source(std::vector<int32_t> tokens) {
  return std::make_shared<VectorSource>(std::move(tokens));
}

std::shared_ptr<TokenSource> make_concat_source(std::vector<std::shared_ptr<TokenSource>> parts) {
  return std::make_shared<ConcatSource>(std::move(parts));
}

std::shared_ptr<TokenSource> make_slice_source(std::shared_ptr<TokenSource> base, size_t begin,
                                               size_t n) {
  if (!base || begin > base->size() || n > base->size() - begin) {
    throw ConfigError(fmt::format("token slice [{}, {}) outside a source of {} tokens", begin,
                                  begin + n, base ? base->size() : 0));
  }
  return std::make_shared<SliceSource>(std::move(base), begin, n);
}

}  // namespace ft::trainer::data

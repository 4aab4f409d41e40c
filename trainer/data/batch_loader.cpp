// batch_loader.cpp: sequential (B,T) next-token batches over a TokenSource, wrapping at the end.
#include <fmt/format.h>

#include <cstring>

#include "ft/core/error.h"
#include "ft/trainer/data.h"

namespace ft::trainer::data {

BatchLoader::BatchLoader(std::shared_ptr<TokenSource> source, int B, int T)
    : source_(std::move(source)), B_(B), T_(T) {
  if (!source_) throw ConfigError("BatchLoader: no token source");
  if (B <= 0 || T <= 0) {
    throw ConfigError(
        fmt::format("batch size and sequence length must be > 0 (got B={}, T={})", B, T));
  }
  const size_t need = static_cast<size_t>(B) * static_cast<size_t>(T) + 1;
  if (source_->size() < need) {
    throw ConfigError(fmt::format("data has {} tokens but one batch of B={} x T={} needs {}",
                                  source_->size(), B, T, need));
  }
  scratch_.resize(need);
}

void BatchLoader::next(int32_t* inputs, int32_t* targets) {
  const size_t bt = static_cast<size_t>(B_) * static_cast<size_t>(T_);
  if (position_ + bt + 1 > source_->size()) {  // only after an external set_position misuse
    position_ = 0;
    ++epoch_;
  }
  source_->read(position_, bt + 1, scratch_.data());
  std::memcpy(inputs, scratch_.data(), bt * sizeof(int32_t));
  std::memcpy(targets, scratch_.data() + 1, bt * sizeof(int32_t));
  position_ += bt;
  if (position_ + bt + 1 > source_->size()) {  // the next batch would run past the end
    position_ = 0;
    ++epoch_;
  }
}

void BatchLoader::set_position(uint64_t pos) {
  const size_t bt = static_cast<size_t>(B_) * static_cast<size_t>(T_);
  if (pos > source_->size() || bt + 1 > source_->size() - pos) {
    throw ConfigError(
        fmt::format("data position {} is out of range: a batch needs {} tokens "
                    "and the data has {} (was the data set changed since the "
                    "checkpoint?)",
                    pos, bt + 1, source_->size()));
  }
  position_ = pos;
}

size_t BatchLoader::batches_per_epoch() const {
  const size_t bt = static_cast<size_t>(B_) * static_cast<size_t>(T_);
  return (source_->size() - 1) / bt;
}

}  // namespace ft::trainer::data

// clean_io.cpp: JSONL pass-through, bad-line handling and the --removed audit for ft-data clean.
#include "clean_io.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "ft/core/error.h"

namespace ft::data_cli {

namespace {

using trainer::data::CleanDecision;
using trainer::data::DocumentOrigin;
using Ordered = nlohmann::ordered_json;

std::string dump(const Ordered& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Appends `text` so that for_each_document reads it back as one document: blank lines inside
// it are dropped and a line that is exactly "%" (a fortune separator) becomes "% ".
void append_text_document(std::string& out, std::string_view text) {
  bool first = true;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\f\v") == std::string_view::npos) continue;
    if (!first) out += '\n';
    first = false;
    out.append(line);
    if (line == "%") out += ' ';
  }
  out += "\n\n";
}

}  // namespace

CleanIo::CleanIo(const CleanIoOptions& options, const std::string& out_path,
                 const trainer::data::CleanOptions& clean)
    : options_(options),
      out_(out_path),
      removed_(options.removed_path.empty()
                   ? nullptr
                   : std::make_unique<AtomicFileWriter>(options.removed_path)),
      cleaner_(clean, [this](const CleanDecision& d) { decided(d); }) {
  first_of_two_ = cleaner_.needs_second_pass();
}

void CleanIo::begin_second_pass() {
  cleaner_.finish();
  first_of_two_ = false;
}

void CleanIo::add(std::string_view doc, const DocumentOrigin& origin) {
  std::string text, error;
  Pending p;
  // The first of two passes only feeds the Cleaner: bad lines are counted and recorded in
  // the pass that writes.
  const bool ok = read_document(doc, origin, options_, &text,
                                first_of_two_ || !removed_ ? nullptr : &p.id, &error);
  if (first_of_two_) {
    if (ok) cleaner_.add(text);
    return;
  }
  p.origin = origin_text(origin);
  p.jsonl = trainer::data::is_jsonl_path(origin.file);
  p.raw = doc;
  if (!ok) {
    ++bad_lines_;
    p.bad = true;
    p.error = std::move(error);
    pending_.push_back(std::move(p));
    return;
  }
  if (p.id.empty()) p.id = p.origin;
  pending_.push_back(std::move(p));
  if (cleaner_.needs_second_pass()) {
    cleaner_.verify(text);
  } else {
    cleaner_.add(text);
  }
}

void append_bad_line_record(std::string& out, const std::string& origin, const std::string& error,
                            std::string_view line) {
  Ordered r;
  r["rule"] = "bad_line";
  r["origin"] = origin;
  r["error"] = error;
  r["line"] = std::string(line);
  out += dump(r) + '\n';
}

void append_removed_record(std::string& out, std::string_view raw, bool jsonl,
                           const std::string& id, const std::string& origin, const CleanDecision& d,
                           const std::string& duplicate_of_id) {
  Ordered r;
  r["rule"] = std::string(d.rule);
  r["id"] = id;
  r["origin"] = origin;
  if (d.duplicate_of >= 0) {
    r["duplicate_of"] = duplicate_of_id;
    r["similarity"] = d.similarity;
  }
  r["document"] = jsonl ? Ordered::parse(raw) : Ordered{{"text", std::string(raw)}};
  out += dump(r) + '\n';
}

std::string origin_text(const DocumentOrigin& origin) {
  return fmt::format("{}:{}", origin.file, origin.line);
}

bool read_document(std::string_view doc, const DocumentOrigin& origin,
                   const CleanIoOptions& options, std::string* text, std::string* id,
                   std::string* error) {
  if (!trainer::data::is_jsonl_path(origin.file)) {
    text->assign(doc);
    if (id) *id = origin_text(origin);
    return true;
  }
  try {
    *text =
        trainer::data::decode_jsonl_document(doc, origin, options.text_field, options.id_field, id);
  } catch (const FormatError& e) {
    if (!options.skip_bad_lines) {
      throw FormatError(std::string(e.what()) +
                        " (--on-bad-line skip skips and counts such lines)");
    }
    *error = e.what();
    return false;
  }
  if (id && id->empty()) *id = origin_text(origin);
  return true;
}

void CleanIo::flush_bad_lines() {
  while (!pending_.empty() && pending_.front().bad) {
    const Pending& p = pending_.front();
    if (removed_) append_bad_line_record(removed_buf_, p.origin, p.error, p.raw);
    pending_.pop_front();
  }
}

void CleanIo::decided(const CleanDecision& d) {
  flush_bad_lines();
  if (pending_.empty()) throw Error("ft-data clean: a decision without its document (internal)");
  const Pending p = std::move(pending_.front());
  pending_.pop_front();
  if (d.kept) {
    write_kept(p, d);
  } else {
    write_removed(p, d);
  }
  // A later duplicate may name this document: remember its id (kept, or a near duplicate,
  // which the exact index still holds).
  if (removed_ && (d.kept || d.rule == "near_duplicate")) ids_.emplace(d.ordinal, p.id);
  flush_buffers(false);
}

void append_kept_document(std::string& out, std::string_view raw, bool jsonl,
                          const CleanDecision& d, const CleanIoOptions& options) {
  if (!options.jsonl_out) {
    append_text_document(out, d.text);
    return;
  }
  if (jsonl && !d.text_changed) {
    out += raw;  // every field, byte for byte
  } else if (jsonl) {
    Ordered j = Ordered::parse(raw);
    j[options.text_field] = std::string(d.text);
    out += dump(j);
  } else {
    out += dump(Ordered{{"text", std::string(d.text)}});
  }
  out += '\n';
}

void CleanIo::write_kept(const Pending& p, const CleanDecision& d) {
  append_kept_document(out_buf_, p.raw, p.jsonl, d, options_);
}

void CleanIo::write_removed(const Pending& p, const CleanDecision& d) {
  if (!removed_) return;
  std::string dup;
  if (d.duplicate_of >= 0) {
    const auto it = ids_.find(static_cast<uint64_t>(d.duplicate_of));
    dup = it != ids_.end() ? it->second : fmt::format("#{}", d.duplicate_of);
  }
  append_removed_record(removed_buf_, p.raw, p.jsonl, p.id, p.origin, d, dup);
}

void CleanIo::flush_buffers(bool force) {
  constexpr size_t kFlush = size_t{1} << 20;
  if (force || out_buf_.size() >= kFlush) {
    out_.write(out_buf_.data(), out_buf_.size());
    out_buf_.clear();
  }
  if (removed_ && (force || removed_buf_.size() >= kFlush)) {
    removed_->write(removed_buf_.data(), removed_buf_.size());
    removed_buf_.clear();
  }
}

trainer::data::CleanStats CleanIo::finish() {
  if (first_of_two_) throw Error("ft-data clean: the second pass was never run (internal)");
  if (cleaner_.needs_second_pass()) {
    cleaner_.finish_verify();
  } else {
    cleaner_.finish();
  }
  flush_bad_lines();
  flush_buffers(true);
  out_.commit();
  if (removed_) removed_->commit();
  trainer::data::CleanStats s = cleaner_.stats();
  s.bad_lines_skipped = bad_lines_;
  return s;
}

}  // namespace ft::data_cli

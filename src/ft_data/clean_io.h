// clean_io.h: what 'ft-data clean' reads and writes around the Cleaner: JSONL lines passed
// through with every field, bad lines skipped or refused, and the audit file of removals.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "ft/core/atomic_file.h"
#include "ft/trainer/documents.h"
#include "ft/trainer/quality.h"

namespace ft::data_cli {

struct CleanIoOptions {
  std::string text_field = "text";  // JSONL: the field holding the text
  std::string id_field = "id";      // JSONL: the field naming a document in --removed
  bool skip_bad_lines = false;      // --on-bad-line skip (else fail)
  bool jsonl_out = true;            // the output is JSONL (else text, blank-line separated)
  std::string removed_path;         // --removed FILE.jsonl ("" = none)
};

// Appends the output form of a kept document (`raw`: its JSONL line, or its text) to `out`:
// the line itself, the line with the text replaced, {"text": ...}, or text (see CleanIo).
void append_kept_document(std::string& out, std::string_view raw, bool jsonl,
                          const trainer::data::CleanDecision& d, const CleanIoOptions& options);

// The --removed records: a dropped document (its rule, id, origin, for a duplicate the id of
// the document it duplicates and the similarity, and the document) and a skipped line.
void append_removed_record(std::string& out, std::string_view raw, bool jsonl,
                           const std::string& id, const std::string& origin,
                           const trainer::data::CleanDecision& d,
                           const std::string& duplicate_of_id);
void append_bad_line_record(std::string& out, const std::string& origin, const std::string& error,
                            std::string_view line);
// "FILE:LINE", what --removed calls a document's origin (and its id without --id-field).
std::string origin_text(const trainer::data::DocumentOrigin& origin);

// One input document as ft-data clean reads it: a JSONL line decoded (one parse) into its text
// and, when `id` is given, its --id-field (else FILE:LINE); a text document as it is (its id
// FILE:LINE). A bad JSONL line throws FormatError naming it and the way out, or under
// --on-bad-line skip returns false with `error` saying why.
bool read_document(std::string_view doc, const trainer::data::DocumentOrigin& origin,
                   const CleanIoOptions& options, std::string* text, std::string* id,
                   std::string* error);

// Feeds a Cleaner and writes its decisions in input order. A kept JSONL document is written
// as its input line, byte for byte, unless line cleaning changed its text (then the object
// with only that field replaced, its other fields in their order). A text document becomes
// {"text": ...}. Every removed document, and every skipped bad line, is written to --removed
// with its rule, its id (the id field, else FILE:LINE) and, for a duplicate, the id of the
// document it duplicates.
class CleanIo {
 public:
  CleanIo(const CleanIoOptions& options, const std::string& out_path,
          const trainer::data::CleanOptions& clean);
  // Whether the documents must be read twice (near dedup: the Cleaner's verification pass).
  bool two_passes() const { return cleaner_.needs_second_pass(); }
  // One document (a JSONL line, undecoded, or a text document) from for_each_document.
  void add(std::string_view doc, const trainer::data::DocumentOrigin& origin);
  // Ends the first of two passes; the same documents are then added again, in order.
  void begin_second_pass();
  // Flushes the Cleaner and commits both files; returns the statistics.
  trainer::data::CleanStats finish();

 private:
  struct Pending {
    std::string raw;  // the JSONL line, or the text document
    bool jsonl = false;
    bool bad = false;   // a skipped line: no document, no ordinal
    std::string error;  // why it was skipped
    std::string id, origin;
  };
  void decided(const trainer::data::CleanDecision& d);
  void flush_bad_lines();
  void write_kept(const Pending& p, const trainer::data::CleanDecision& d);
  void write_removed(const Pending& p, const trainer::data::CleanDecision& d);
  void flush_buffers(bool force);

  CleanIoOptions options_;
  AtomicFileWriter out_;
  std::unique_ptr<AtomicFileWriter> removed_;
  std::string out_buf_, removed_buf_;
  std::deque<Pending> pending_;  // added, not yet decided (about one batch)
  // Ids of the documents a later duplicate may name (those that passed the filters and were
  // not exact duplicates), kept only with --removed.
  std::unordered_map<uint64_t, std::string> ids_;
  uint64_t bad_lines_ = 0;
  bool first_of_two_ = false;  // in the first of two passes: nothing is written yet
  trainer::data::Cleaner cleaner_;
};

}  // namespace ft::data_cli

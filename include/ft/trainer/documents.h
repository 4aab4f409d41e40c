// documents.h: streams documents out of text files, fortune files, JSONL and directories.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ft::trainer::data {

// Where a document came from, for error messages and reports.
struct DocumentOrigin {
  std::string file;   // path as given / found
  uint64_t line = 0;  // 1-based first line of the document in that file
};

struct DocumentReadOptions {
  std::string text_field = "text";  // JSONL: the string field that holds the document
  bool skip_empty = true;           // drop documents that are empty after trimming
  // JSONL: pass each non-blank line undecoded (the caller parses it later with
  // decode_jsonl_document, e.g. on a loader worker); skip_empty then cannot apply to JSONL.
  bool raw_jsonl = false;
  // Only the documents whose first byte (in the decompressed file) lies in
  // [range_begin, range_end), with their file-wide line numbers; each file read stops at
  // range_end. Meant for one file at a time: slices of a file for ft-data clean's ranks.
  uint64_t range_begin = 0;
  uint64_t range_end = UINT64_MAX;
};

// The `text_field` string of one JSONL line. Throws FormatError naming origin.file and
// origin.line when the line is not valid JSON or not an object with that string field.
std::string decode_jsonl_document(std::string_view line, const DocumentOrigin& origin,
                                  const std::string& text_field = "text");
// The same, parsing the line once, and `*id` set to its `id_field` (a string as it is, any
// other value as JSON; empty when absent or null).
std::string decode_jsonl_document(std::string_view line, const DocumentOrigin& origin,
                                  const std::string& text_field, const std::string& id_field,
                                  std::string* id);

// Calls `fn(text, origin)` for every document under `paths`, in a fixed order:
//  - a directory contributes its regular files recursively, sorted by path;
//    hidden files (name starting with '.') and llm.c token shards (*.bin) are skipped;
//  - *.jsonl / *.jsonl.gz / *.ndjson: one JSON object per non-blank line; the document is
//    its `text_field` string. A line that is not an object with that string field is a
//    FormatError naming file and line;
//  - any other file (plain or *.gz) is text: documents are separated by one or more blank
//    lines, or by a line that is exactly "%" (the fortune(6) file format). Line ends are
//    kept inside a document; separators are not. Text must be valid UTF-8 or bytes are kept
//    as they are (no decoding is done here).
// `text` is only valid during the call. Returning false from `fn` stops the scan early.
// Throws ConfigError for a missing path, IoError for an unreadable file, FormatError as above.
void for_each_document(const std::vector<std::filesystem::path>& paths,
                       const std::function<bool(std::string_view text, const DocumentOrigin&)>& fn,
                       const DocumentReadOptions& options = {});

// The files for_each_document would read, in its order (for stats and progress).
std::vector<std::filesystem::path> list_document_files(
    const std::vector<std::filesystem::path>& paths);

// Whether `path` is read as JSONL by for_each_document.
bool is_jsonl_path(const std::filesystem::path& path);

}  // namespace ft::trainer::data

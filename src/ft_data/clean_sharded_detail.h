// clean_sharded_detail.h: the pieces of ft-data clean's sharded mode below its phases: the
// byte exchange between ranks, record packing, the rank's slice of the files and its first read.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "clean_io.h"
#include "ft/core/error.h"
#include "ft/trainer/communicator.h"
#include "ft/trainer/documents.h"
#include "ft/trainer/quality.h"

namespace ft::data_cli::shard {

constexpr uint8_t kPassed = 100;    // passed the filters (else a Rule)
constexpr uint8_t kCleaned = 0x80;  // line cleaning changed its text

// All-to-all of byte strings: out[p] goes to rank p; returns what each rank sent here.
std::vector<std::string> exchange(trainer::Communicator& c, std::vector<std::string> out);

template <typename T>
void put(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename T>
T get(const std::string& s, size_t& at) {
  if (at + sizeof(T) > s.size()) throw Error("sharded clean: a truncated record (internal)");
  T v;
  std::memcpy(&v, s.data() + at, sizeof(T));
  at += sizeof(T);
  return v;
}

// A byte range of one input file: the documents that start in [begin, end).
struct Slice {
  std::filesystem::path file;
  uint64_t begin = 0, end = UINT64_MAX;
};
// This rank's slices: the input bytes in file order, cut at r/R of the total; a plain file may
// be cut anywhere (a document belongs to the slice its first byte is in), a gzip file goes
// whole to the rank whose share it starts in.
std::vector<Slice> my_slices(const std::vector<std::filesystem::path>& inputs, int me, int R);

// One read of this rank's slices: fn(raw, text, jsonl, origin, id) per document (id: with
// --removed, read_document's; else empty); a bad JSONL line goes to bad(raw, origin, error)
// with --on-bad-line skip, and is refused as read_document says otherwise.
template <typename Fn, typename BadFn>
void read_local(const std::vector<Slice>& slices, const CleanIoOptions& io, Fn&& fn, BadFn&& bad) {
  const bool ids = !io.removed_path.empty();
  std::string text, id, error;
  for (const Slice& slice : slices) {
    trainer::data::DocumentReadOptions ro;
    ro.text_field = io.text_field;
    ro.raw_jsonl = true;
    ro.range_begin = slice.begin;
    ro.range_end = slice.end;
    trainer::data::for_each_document(
        {slice.file},
        [&](std::string_view doc, const trainer::data::DocumentOrigin& origin) {
          if (!read_document(doc, origin, io, &text, ids ? &id : nullptr, &error)) {
            bad(doc, origin, error);
          } else {
            fn(doc, std::string_view(text), trainer::data::is_jsonl_path(origin.file), origin,
               std::string_view(id));
          }
          return true;
        },
        ro);
  }
}

// The first read: per document its filter verdict; per document that passed, its content
// hash, band hashes and 8-bit signature (and id, with --removed).
struct Pass1 {
  std::vector<uint8_t> kind;     // per local document
  std::vector<uint64_t> passed;  // local index of each document that passed the filters
  std::vector<trainer::data::Hash128> hashes;  // per passed document
  std::vector<uint32_t> keys;                  // per passed document x bands
  std::vector<uint8_t> sig8;                   // per passed document x num_perm
  std::vector<std::string> ids;  // with --removed: per local document (passed ones only)
  uint64_t bad_lines = 0;
};
Pass1 sign_local(const std::vector<Slice>& files, const trainer::data::CleanOptions& clean,
                 const CleanIoOptions& io, const trainer::data::NearDupIndex& lsh,
                 const trainer::data::MinHasher& hasher);

}  // namespace ft::data_cli::shard

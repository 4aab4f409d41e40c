// clean_cmd.cpp: 'ft-data clean': noise filters, exact and near-duplicate removal, statistics.
#include <fmt/format.h>
#include <omp.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "clean_io.h"
#include "clean_sharded.h"
#include "commands.h"
#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/trainer/communicator.h"
#include "ft/trainer/documents.h"
#include "ft/trainer/quality.h"

namespace ft::data_cli {

namespace {

namespace fs = std::filesystem;
namespace po = boost::program_options;
using namespace ft::trainer::data;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void check(bool ok, const std::string& msg) {
  if (!ok) throw ConfigError(msg);
}

}  // namespace

int clean_main(const std::vector<std::string>& args) {
  std::vector<std::string> inputs;
  std::string out, stats_path, shingle = "word", text_field = "text", id_field = "id";
  std::string on_bad_line = "fail", removed;
  int threads = 0;
  bool no_exact = false, no_near = false, no_filters = false, quiet = false;
  CleanOptions o;
  FilterOptions& f = o.filters;
  MinHashOptions& m = o.minhash;
  po::options_description cli("ft-data clean IN... --out OUT [options]");
  // clang-format off
  cli.add_options()
    ("help,h", "show this help")
    ("in", po::value(&inputs)->multitoken(), "input files or directories (text, fortune, JSONL, .gz)")
    ("out", po::value(&out), "output: JSONL when it ends in .jsonl (a JSONL input line kept as it was, every field; text documents as {\"text\": ...}), else text with a blank line between documents")
    ("stats", po::value(&stats_path), "write the statistics as JSON to FILE")
    ("text-field", po::value(&text_field)->default_value("text"), "JSONL input: the field holding the text (every other field passes through unchanged)")
    ("id-field", po::value(&id_field)->default_value("id"), "JSONL input: the field that names a document in --removed (else FILE:LINE)")
    ("on-bad-line", po::value(&on_bad_line)->default_value("fail"), "a JSONL line that is not an object with the text field: fail (naming file, line and byte) | skip (counted, and written to --removed)")
    ("removed", po::value(&removed), "write every removed document to FILE.jsonl: its rule, id, origin and, for a duplicate, the id of the document it duplicates")
    ("threads", po::value(&threads)->default_value(0), "OpenMP threads (0: OMP_NUM_THREADS / all cores)")
    ("quiet,q", po::bool_switch(&quiet), "no statistics table")
    ("no-exact-dedup", po::bool_switch(&no_exact), "keep exact duplicates")
    ("no-near-dedup", po::bool_switch(&no_near), "keep near duplicates")
    ("near-dup-threshold", po::value(&m.threshold)->default_value(0.8, "0.8"), "Jaccard similarity J in (0, 1] at or above which a document is a near duplicate")
    ("shingle", po::value(&shingle)->default_value("word"), "shingles: word (n-grams of lower-cased alphanumeric words) | char (byte n-grams)")
    ("shingle-size", po::value(&m.shingle_size)->default_value(5), "n of the shingle n-grams")
    ("num-perm", po::value(&m.num_perm)->default_value(128), "MinHash permutations (signature length)")
    ("bands", po::value(&m.bands)->default_value(0), "LSH bands (0: chosen from the threshold, datasketch's rule)")
    ("rows", po::value(&m.rows)->default_value(0), "LSH rows per band (with --bands)")
    ("seed", po::value(&m.seed)->default_value(1), "MinHash seed")
    ("no-filters", po::bool_switch(&no_filters), "disable all noise filters")
    ("max-non-text-ratio", po::value(&f.max_non_text_ratio)->default_value(0.001, "0.001"), "max (invalid UTF-8 + control bytes) / bytes")
    ("min-words", po::value(&f.min_words)->default_value(3), "min words (C4: 3)")
    ("max-words", po::value(&f.max_words)->default_value(100000), "max words (Gopher: 100000)")
    ("min-chars", po::value(&f.min_chars)->default_value(0), "min bytes")
    ("max-chars", po::value(&f.max_chars)->default_value(1000000), "max bytes")
    ("min-alpha-ratio", po::value(&f.min_alpha_word_ratio)->default_value(0.8, "0.8"), "min fraction of words with a letter (Gopher: 0.8)")
    ("max-symbol-ratio", po::value(&f.max_symbol_word_ratio)->default_value(0.1, "0.1"), "max '#' or '...' per word (Gopher: 0.1)")
    ("max-dup-line-ratio", po::value(&f.max_dup_line_ratio)->default_value(0.3, "0.3"), "max duplicate lines / lines (Gopher: 0.3)")
    ("max-dup-line-char-ratio", po::value(&f.max_dup_line_char_ratio)->default_value(0.2, "0.2"), "max chars in duplicate lines / chars (Gopher: 0.2)")
    ("max-top-ngram-ratio", po::value(&f.max_top_ngram_ratio)->default_value(0.2, "0.2"), "max chars of the top 2-gram (3-gram: -0.02, 4-gram: -0.04; Gopher)")
    ("max-dup-ngram-ratio", po::value(&f.max_dup_ngram_ratio)->default_value(0.15, "0.15"), "max chars in duplicated 5-grams (-0.01 per n to 10; Gopher)")
    ("c4-boilerplate", po::value(&f.c4_boilerplate)->default_value(true), "drop C4 boilerplate lines (javascript, terms of use, ...) and lorem-ipsum documents");
  // clang-format on
  po::positional_options_description pos;
  pos.add("in", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(cli).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw ConfigError(e.what());
  }
  if (vm.count("help")) {
    std::cout << cli << "\n";
    return 0;
  }
  check(!inputs.empty(), "no input: give one or more files or directories");
  check(!out.empty(), "--out is required");
  check(shingle == "word" || shingle == "char",
        fmt::format("--shingle '{}' must be word or char", shingle));
  check(threads >= 0, "--threads must be >= 0");
  check(on_bad_line == "fail" || on_bad_line == "skip",
        fmt::format("--on-bad-line '{}' must be fail or skip", on_bad_line));
  check(removed.empty() || fs::path(removed) != fs::path(out), "--removed must differ from --out");
  check(f.max_non_text_ratio >= 0, "--max-non-text-ratio must be >= 0");
  check(f.min_words >= 0 && f.min_words <= f.max_words, "--min-words must be in [0, --max-words]");
  check(f.min_chars >= 0 && f.min_chars <= f.max_chars, "--min-chars must be in [0, --max-chars]");
  for (const auto& [name, v] : {std::pair{"--min-alpha-ratio", f.min_alpha_word_ratio},
                                {"--max-dup-line-ratio", f.max_dup_line_ratio},
                                {"--max-dup-line-char-ratio", f.max_dup_line_char_ratio},
                                {"--max-top-ngram-ratio", f.max_top_ngram_ratio},
                                {"--max-dup-ngram-ratio", f.max_dup_ngram_ratio}}) {
    check(v >= 0 && v <= 1, fmt::format("{} {} must be in [0, 1]", name, v));
  }
  check(f.max_symbol_word_ratio >= 0, "--max-symbol-ratio must be >= 0");
  m.shingle = shingle == "char" ? ShingleKind::kChar : ShingleKind::kWord;
  f.enabled = !no_filters;
  o.exact_dedup = !no_exact;
  o.near_dedup = !no_near;
  const fs::path out_path(out);
  const fs::path out_dir = out_path.parent_path().empty() ? fs::path(".") : out_path.parent_path();
  check(fs::is_directory(out_dir),
        fmt::format("--out: directory '{}' does not exist", out_dir.string()));
  if (threads > 0) omp_set_num_threads(threads);

  const bool jsonl = ends_with(out, ".jsonl");
  const auto t0 = std::chrono::steady_clock::now();
  CleanIoOptions io;
  io.text_field = text_field;
  io.id_field = id_field;
  io.skip_bad_lines = on_bad_line == "skip";
  io.jsonl_out = jsonl;
  io.removed_path = removed;
  std::vector<fs::path> paths(inputs.begin(), inputs.end());
  // Under mpirun with more than one rank: the sharded mode (the same output).
  std::unique_ptr<trainer::Communicator> world;
  if (trainer::launched_by_mpi()) world = trainer::make_world_communicator(600);
  const int ranks = world ? world->world_size() : 1;
  const bool lead = !world || world->rank() == 0;
  CleanStats stats;
  if (ranks > 1) {
    stats = clean_sharded(paths, out, o, io, *world);
  } else {
    CleanIo cleaner(io, out, o);
    DocumentReadOptions ro;
    ro.text_field = text_field;
    ro.raw_jsonl = true;  // CleanIo decodes each line: its fields pass through, bad ones count
    auto read_all = [&] {
      for_each_document(
          paths,
          [&](std::string_view doc, const DocumentOrigin& origin) {
            cleaner.add(doc, origin);
            return true;
          },
          ro);
    };
    read_all();
    if (cleaner.two_passes()) {  // near duplicates are verified on a second read of the input
      cleaner.begin_second_pass();
      read_all();
    }
    stats = cleaner.finish();
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (lead && !quiet) {
    std::string in_list;
    for (const std::string& in : inputs) in_list += (in_list.empty() ? "" : " ") + in;
    fmt::print("ft-data clean: {} -> {} ({}{})\n", in_list, out, jsonl ? "JSONL" : "text",
               ranks > 1 ? fmt::format(", {} ranks", ranks) : "");
    fmt::print("{}", stats.to_table());
  }
  if (lead && !stats_path.empty()) {
    nlohmann::json j = stats.to_json();
    j["ranks"] = ranks;
    j["inputs"] = inputs;
    j["output"] = out;
    if (!removed.empty()) j["removed_file"] = removed;
    j["threads"] = omp_get_max_threads();
    j["options"] = {{"near_dup_threshold", m.threshold},
                    {"shingle", shingle},
                    {"shingle_size", m.shingle_size},
                    {"exact_dedup", o.exact_dedup},
                    {"near_dedup", o.near_dedup},
                    {"filters", f.enabled},
                    {"min_words", f.min_words},
                    {"max_words", f.max_words},
                    {"min_chars", f.min_chars},
                    {"max_chars", f.max_chars},
                    {"max_non_text_ratio", f.max_non_text_ratio},
                    {"min_alpha_ratio", f.min_alpha_word_ratio},
                    {"max_symbol_ratio", f.max_symbol_word_ratio},
                    {"max_dup_line_ratio", f.max_dup_line_ratio},
                    {"max_dup_line_char_ratio", f.max_dup_line_char_ratio},
                    {"max_top_ngram_ratio", f.max_top_ngram_ratio},
                    {"max_dup_ngram_ratio", f.max_dup_ngram_ratio},
                    {"c4_boilerplate", f.c4_boilerplate},
                    {"on_bad_line", on_bad_line}};
    write_file_atomic(stats_path, j.dump(2) + "\n");
  }
  if (world) {
    world.reset();
    trainer::finalize_comm();
  }
  return 0;
}

}  // namespace ft::data_cli

// space.cpp: ft-train's flags (from its option table), the knob space, grid enumeration, knob
// application with the batch rule, running a diagnosis and memory prediction of a flag config.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "ft/core/error.h"
#include "ft/profiler/diagnosis_json.h"
#include "ft/tuner/memory_model.h"
#include "ft/tuner/search.h"

namespace ft::tuner {

std::set<std::string> ft_train_flags() {
  std::set<std::string> out;
  for (const auto& o : trainer::option_table()) out.insert(o.name);
  return out;
}

std::map<std::string, std::string> ft_train_defaults() {
  std::map<std::string, std::string> out;
  for (const auto& o : trainer::option_table()) {
    if (!o.default_value.empty()) out[o.name] = o.default_value;
  }
  return out;
}

namespace {

// `c` as ft_trainer parses it. A flag ft-train does not have is a ConfigError naming it when
// `strict`, else dropped (as are --metrics and --config, which name files).
trainer::TrainConfig parse_config(Config c, bool strict) {
  c.erase("metrics");
  c.erase("config");
  for (auto it = c.begin(); it != c.end();) {
    if (trainer::find_option(it->first)) {
      ++it;
    } else if (strict) {
      throw ConfigError(fmt::format("--{} is neither an ft-tune nor an ft-train flag", it->first));
    } else {
      it = c.erase(it);
    }
  }
  std::vector<std::string> words = config_args(c);
  words.insert(words.begin(), "ft-train");
  std::vector<const char*> argv;
  for (auto& w : words) argv.push_back(w.c_str());
  return *trainer::parse_train_args(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

std::optional<trainer::TrainConfig> to_train_config(const Config& c) {
  try {
    return parse_config(c, /*strict=*/false);
  } catch (const ConfigError&) {
    return std::nullopt;
  }
}

void validate_config(const Config& c) { parse_config(c, /*strict=*/true); }

std::string effective_attention(const Config& c,
                                const std::map<std::string, std::string>& defaults) {
  static const trainer::TrainConfig kCli = *to_train_config({});  // for unset flags
  const auto get = [&](const std::string& k, const std::string& fallback) {
    if (const auto it = c.find(k); it != c.end()) return it->second;
    if (const auto it = defaults.find(k); it != defaults.end()) return it->second;
    return fallback;
  };
  const std::string a = get("attention", "auto");
  if (a != "auto") return trainer::attention_name(trainer::parse_attention(a));
  try {
    const int T = std::stoi(get("seq-len", std::to_string(kCli.seq_len)));
    const int C = std::stoi(get("channels", std::to_string(kCli.model.channels)));
    const int NH = std::stoi(get("heads", std::to_string(kCli.model.num_heads)));
    if (NH > 0 && C % NH == 0) {
      return trainer::attention_name(trainer::choose_attention(T, C / NH));
    }
  } catch (const std::exception&) {  // a malformed number: ft-train rejects the config itself
  }
  return a;
}

std::string effective_key(const Config& c, const std::map<std::string, std::string>& defaults) {
  static const char* kKnobs[] = {
      "precision",   "checkpoint", "attention",      "allocator-caching", "allocator-huge-pages",
      "micro-batch", "grad-accum", "loader-workers", "prefetch",          "dp",
      "tp",          "pp",         "zero",           "bucket-mb",         "overlap"};
  Config e = c;
  for (const char* k : kKnobs) {
    const auto d = defaults.find(k);
    if (!e.count(k) && d != defaults.end()) e[k] = d->second;
  }
  if (e.count("attention")) e["attention"] = effective_attention(c, defaults);
  for (auto& [k, v] : e) {
    if (k != "allocator-caching" && k != "allocator-huge-pages" && k != "overlap") continue;
    if (v == "1") v = "true";
    if (v == "0") v = "false";
  }
  return config_key(e);
}

namespace {

std::string fmt_num(double v) { return fmt::format("{:.6g}", v); }

}  // namespace

int global_batch(const Config& c) {
  const auto get = [&](const char* k, int def) {
    const auto it = c.find(k);
    if (it == c.end()) return def;
    try {
      return std::stoi(it->second);
    } catch (const std::exception&) {
      throw ConfigError(fmt::format("--{} '{}' is not an integer", k, it->second));
    }
  };
  static const trainer::TrainConfig kDefaults = *to_train_config({});
  return get("micro-batch", kDefaults.micro_batch) * get("grad-accum", kDefaults.grad_accum);
}

double predicted_peak(const Config& c) {
  const auto tc = to_train_config(c);
  if (!tc) return 0;
  try {
    return static_cast<double>(predict_memory(*tc, ParallelLayout::of(tc->parallel)).peak);
  } catch (const Error&) {
    return 0;
  }
}

std::optional<Config> apply_knob(const Config& incumbent, const Config& patch,
                                 const BatchRule& rule, std::string* why) {
  Config c = incumbent;
  for (const auto& [k, v] : patch) c[k] = v;
  const int old_g = global_batch(incumbent);
  int new_g = global_batch(c);
  if (new_g != old_g && patch.count("micro-batch") && !patch.count("grad-accum") &&
      !rule.allow_change) {
    const int b = std::stoi(c["micro-batch"]);
    if (b > 0 && old_g % b == 0) {
      c["grad-accum"] = std::to_string(old_g / b);
      new_g = global_batch(c);
    }
  }
  if (new_g == old_g) return c;
  if (!rule.allow_change) {
    if (why) {
      *why = fmt::format(
          "changes the global batch from {} to {} sequences (pass "
          "--allow-batch-change to permit it)",
          old_g, new_g);
    }
    return std::nullopt;
  }
  const auto tc = to_train_config(incumbent);
  if (!tc) {
    if (why) *why = "the incumbent's flags do not parse";
    return std::nullopt;
  }
  const double ratio = static_cast<double>(new_g) / old_g;
  const double lr_factor = rule.lr_scaling == "linear" ? ratio : std::sqrt(ratio);
  if (!patch.count("lr")) c["lr"] = fmt_num(tc->lr * lr_factor);
  if (!patch.count("min-lr")) c["min-lr"] = fmt_num(tc->min_lr * lr_factor);
  if (!patch.count("steps")) {
    c["steps"] = std::to_string(std::max(1L, std::lround(tc->steps / ratio)));
  }
  if (!patch.count("warmup")) {
    c["warmup"] = std::to_string(std::max(0L, std::lround(tc->warmup / ratio)));
  }
  return c;
}

std::vector<Dimension> default_space(const Config& baseline, const std::set<std::string>& flags,
                                     const BatchRule& rule, int ranks) {
  std::vector<Dimension> dims;
  dims.push_back(
      {"precision", {{{"precision", "fp32"}}, {{"precision", "bf16"}}, {{"precision", "fp16"}}}});
  dims.push_back({"checkpoint", {{{"checkpoint", "none"}}, {{"checkpoint", "block"}}}});
  Dimension split{"micro-batch x grad-accum", {}};
  const int g = global_batch(baseline);
  for (int b = g; b >= 1 && split.settings.size() < 4; b /= 2) {
    if (g % b == 0) {
      split.settings.push_back(
          {{"micro-batch", std::to_string(b)}, {"grad-accum", std::to_string(g / b)}});
    }
  }
  if (rule.allow_change) {
    const auto it = baseline.find("micro-batch");
    const int b = it == baseline.end() ? g : std::stoi(it->second);
    for (int f : {2, 4}) split.settings.push_back({{"micro-batch", std::to_string(b * f)}});
  }
  dims.push_back(split);
  if (flags.count("loader-workers")) {
    Dimension loader{"loader", {}};
    const bool prefetch = flags.count("prefetch") > 0;
    loader.settings.push_back(Config{{"loader-workers", "0"}});
    for (const char* w : {"1", "2"}) {
      loader.settings.push_back(prefetch ? Config{{"loader-workers", w}, {"prefetch", "4"}}
                                         : Config{{"loader-workers", w}});
    }
    dims.push_back(loader);
  }
  Dimension allocator{"allocator",
                      {{{"allocator-caching", "true"}}, {{"allocator-caching", "false"}}}};
  // A baseline on 4 KiB pages also gets both ways of paying fewer page faults at once.
  const auto huge = baseline.find("allocator-huge-pages");
  if (flags.count("allocator-huge-pages") && huge != baseline.end() &&
      (huge->second == "false" || huge->second == "0")) {
    allocator.settings.insert(allocator.settings.begin(), Config{{"allocator-caching", "true"},
                                                                 {"allocator-huge-pages", "true"}});
  }
  dims.push_back(allocator);
  dims.push_back({"attention", {{{"attention", "flash"}}, {{"attention", "naive"}}}});
  if (ranks > 1 && flags.count("dp") && flags.count("tp") && flags.count("pp")) {
    const auto tc = to_train_config(baseline);
    Dimension split{"parallel split", {}};
    for (int dp = ranks; dp >= 1; --dp) {
      if (ranks % dp) continue;
      for (int tp = 1; tp <= ranks / dp; ++tp) {
        if ((ranks / dp) % tp) continue;
        const int pp = ranks / dp / tp;
        if (tc &&
            (tc->model.num_heads % tp || tc->model.channels % tp || pp > tc->model.num_layers)) {
          continue;
        }
        for (int zero = 0; zero <= (dp > 1 && flags.count("zero") ? 2 : 0); ++zero) {
          Config c{
              {"dp", std::to_string(dp)}, {"tp", std::to_string(tp)}, {"pp", std::to_string(pp)}};
          if (flags.count("zero")) c["zero"] = std::to_string(zero);
          split.settings.push_back(c);
        }
      }
    }
    dims.push_back(split);
    if (flags.count("overlap") && flags.count("bucket-mb")) {
      const double b = tc ? tc->parallel.bucket_mb : 25;
      dims.push_back({"dp communication",
                      {{{"overlap", "true"}, {"bucket-mb", fmt_num(b)}},
                       {{"overlap", "true"}, {"bucket-mb", fmt_num(b / 4)}},
                       {{"overlap", "false"}, {"bucket-mb", fmt_num(b)}}}});
    }
  }
  return dims;
}

std::vector<Config> derived_knobs(const profiler::Finding& f, const Config& inc) {
  const auto tc = to_train_config(inc);
  if (!tc) return {};
  const int B = tc->micro_batch, K = tc->grad_accum;
  std::vector<Config> out;
  if (f.cls == "comm") {
    if (!tc->parallel.overlap) out.push_back({{"overlap", "true"}});
    out.push_back({{"bucket-mb", fmt_num(2 * tc->parallel.bucket_mb)}});
    out.push_back({{"grad-accum", std::to_string(2 * K)}});
  } else if (f.cls == "parallel" && f.title.find("bubble") != std::string::npos) {
    if (B >= 2 && B % 2 == 0) {
      out.push_back(
          {{"micro-batch", std::to_string(B / 2)}, {"grad-accum", std::to_string(2 * K)}});
    }
    out.push_back({{"grad-accum", std::to_string(4 * K)}});
  }
  return out;
}

std::vector<Config> grid_configs(const Config& baseline, const std::vector<Dimension>& space,
                                 uint64_t seed, const BatchRule& rule,
                                 const std::map<std::string, std::string>& defaults) {
  std::vector<Config> all{baseline};
  std::set<std::string> seen{effective_key(baseline, defaults)};
  std::vector<size_t> idx(space.size(), 0);
  std::vector<Config> rest;
  for (;;) {
    Config patch;
    for (size_t d = 0; d < space.size(); ++d) {
      if (space[d].settings.empty()) continue;
      for (const auto& [k, v] : space[d].settings[idx[d]]) patch[k] = v;
    }
    rest.push_back(patch);
    size_t d = 0;
    while (d < space.size() && ++idx[d] >= std::max<size_t>(1, space[d].settings.size())) {
      idx[d++] = 0;
    }
    if (d == space.size()) break;
  }
  std::mt19937_64 rng(seed);
  std::shuffle(rest.begin(), rest.end(), rng);
  for (Config& patch : rest) {
    // The split applies against the baseline; batch-changing patches get the rule's LR scaling.
    std::string why;
    const auto c = apply_knob(baseline, patch, rule, &why);
    if (!c) continue;
    if (seen.insert(effective_key(*c, defaults)).second) all.push_back(*c);
  }
  return all;
}

profiler::Diagnosis run_diagnosis(const std::filesystem::path& ft_diagnose,
                                  const std::filesystem::path& dir, const Config& config,
                                  double timeout_s, int ranks) {
  const auto report = dir / "report.json";
  if (std::filesystem::exists(report)) return profiler::read_diagnosis_file(report);
  std::filesystem::create_directories(dir);
  std::vector<std::string> cmd{ft_diagnose.string(), "run", "--out", dir.string()};
  if (ranks > 1) cmd.insert(cmd.end(), {"--ranks", std::to_string(ranks)});
  for (const auto& w : config_args(config)) cmd.push_back(w);
  const auto log = dir.string() + ".log";
  const ChildResult r = run_child(cmd, log, timeout_s);
  if (r.timed_out) {
    throw IoError(
        fmt::format("ft-diagnose did not finish within {:.0f} s (log {})", timeout_s, log));
  }
  if (r.exit_code != 0) {
    throw IoError(fmt::format("ft-diagnose failed with exit status {}: {} (log {})", r.exit_code,
                              last_error_line(log), log));
  }
  if (!std::filesystem::exists(report)) {
    throw IoError(fmt::format("ft-diagnose wrote no {}", report.string()));
  }
  return profiler::read_diagnosis_file(report);
}

}  // namespace ft::tuner

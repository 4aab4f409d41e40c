// spec.cpp: the tuning spec of any training program: parsing, checks, templates, the knob space.
#include "ft/tuner/spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "ft/core/error.h"

namespace ft::tuner {
namespace {

using json = nlohmann::ordered_json;  // knobs and value maps keep the spec's order

constexpr const char* kReserved[] = {"steps", "trial_dir", "warmup-excluded", "quiet"};

// Finding classes a knob may fix: the wait classes and the other finding classes.
std::set<std::string> finding_classes() {
  std::set<std::string> out = {"precision", "batch", "loss", "environment", "parallel"};
  for (int c = 0; c < profiler::kNumWaitClasses; ++c)
    out.insert(profiler::wait_class_name(static_cast<profiler::WaitClass>(c)));
  return out;
}

std::string scalar_text(const json& v, const std::string& where) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer() || v.is_number_unsigned() || v.is_number_float()) return v.dump();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  throw ConfigError(fmt::format("{}: expected a string or a number, found {}", where, v.dump()));
}

bool identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

void check_fields(const json& obj, const std::set<std::string>& allowed, const std::string& where) {
  for (const auto& [k, v] : obj.items()) {
    (void)v;
    if (!allowed.count(k)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      throw ConfigError(fmt::format("{}: unknown field '{}' (expected: {})", where, k, list));
    }
  }
}

SpecKnob parse_knob(const std::string& name, const json& k, const std::string& where) {
  if (!identifier(name)) {
    throw ConfigError(fmt::format(
        "{}: knob name '{}' is not an identifier ([A-Za-z_][A-Za-z0-9_]*)", where, name));
  }
  for (const char* r : kReserved)
    if (name == r)
      throw ConfigError(fmt::format("{}: '{}' is a reserved placeholder", where, name));
  if (!k.is_object()) throw ConfigError(where + ": expected an object");
  check_fields(k, {"values", "baseline", "fixes", "scales_batch"}, where);
  SpecKnob knob;
  knob.name = name;
  if (!k.contains("values")) throw ConfigError(where + ": 'values' is required");
  const json& vals = k.at("values");
  if (vals.is_array()) {
    for (size_t i = 0; i < vals.size(); ++i)
      knob.values.push_back(scalar_text(vals[i], fmt::format("{}.values[{}]", where, i)));
  } else if (vals.is_object()) {
    for (const auto& [v, text] : vals.items()) {
      knob.values.push_back(v);
      knob.text[v] = scalar_text(text, fmt::format("{}.values.{}", where, v));
    }
  } else {
    throw ConfigError(where + ".values: expected an array or an object");
  }
  if (knob.values.empty()) throw ConfigError(where + ".values: empty");
  std::set<std::string> seen;
  for (const auto& v : knob.values)
    if (!seen.insert(v).second)
      throw ConfigError(fmt::format("{}.values: '{}' appears twice", where, v));
  knob.baseline = k.contains("baseline") ? scalar_text(k.at("baseline"), where + ".baseline")
                                         : knob.values.front();
  if (!seen.count(knob.baseline)) {
    throw ConfigError(
        fmt::format("{}.baseline '{}' is not one of its values", where, knob.baseline));
  }
  if (k.contains("fixes")) {
    const json& f = k.at("fixes");
    if (!f.is_array()) throw ConfigError(where + ".fixes: expected an array of finding classes");
    const std::set<std::string> classes = finding_classes();
    for (const auto& c : f) {
      const std::string cls = scalar_text(c, where + ".fixes");
      if (!classes.count(cls)) {
        std::string list;
        for (const auto& a : classes) list += (list.empty() ? "" : ", ") + a;
        throw ConfigError(
            fmt::format("{}.fixes: unknown finding class '{}' (one of: {})", where, cls, list));
      }
      knob.fixes.push_back(cls);
    }
  }
  if (k.contains("scales_batch")) {
    if (!k.at("scales_batch").is_boolean())
      throw ConfigError(where + ".scales_batch: expected true or false");
    knob.scales_batch = k.at("scales_batch").get<bool>();
  }
  return knob;
}

// Arithmetic over decimal numbers (recursive descent; depth bounded by the text's length).
class Arith {
 public:
  explicit Arith(const std::string& s) : s_(s) {}
  double parse() {
    const double v = sum();
    skip();
    if (p_ != s_.size()) fail("unexpected '" + s_.substr(p_, 1) + "'");
    return v;
  }

 private:
  void skip() {
    while (p_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[p_]))) ++p_;
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw ConfigError(fmt::format("arithmetic '{}': {} at character {}", s_, why, p_ + 1));
  }
  double sum() {
    double v = product();
    for (skip(); p_ < s_.size() && (s_[p_] == '+' || s_[p_] == '-'); skip()) {
      const char op = s_[p_++];
      const double r = product();
      v = op == '+' ? v + r : v - r;
    }
    return v;
  }
  double product() {
    double v = unary();
    for (skip(); p_ < s_.size() && (s_[p_] == '*' || s_[p_] == '/'); skip()) {
      const char op = s_[p_++];
      const double r = unary();
      if (op == '/' && r == 0) fail("division by zero");
      v = op == '*' ? v * r : v / r;
    }
    return v;
  }
  double unary() {
    skip();
    if (p_ < s_.size() && s_[p_] == '-') {
      ++p_;
      return -unary();
    }
    if (p_ < s_.size() && s_[p_] == '(') {
      ++p_;
      const double v = sum();
      skip();
      if (p_ >= s_.size() || s_[p_] != ')') fail("expected ')'");
      ++p_;
      return v;
    }
    const size_t start = p_;
    while (p_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[p_])) || s_[p_] == '.'))
      ++p_;
    if (start == p_) fail(p_ < s_.size() ? "expected a number" : "unexpected end");
    try {
      size_t used = 0;
      const std::string t = s_.substr(start, p_ - start);
      const double v = std::stod(t, &used);
      if (used != t.size()) fail("malformed number '" + t + "'");
      return v;
    } catch (const std::invalid_argument&) {
      fail("malformed number");
    } catch (const std::out_of_range&) {
      fail("number out of range");
    }
  }
  const std::string& s_;
  size_t p_ = 0;
};

}  // namespace

const std::string& SpecKnob::text_of(const std::string& value) const {
  const auto it = text.find(value);
  return it == text.end() ? value : it->second;
}

const SpecKnob* TuneSpec::knob(const std::string& name) const {
  for (const SpecKnob& k : knobs)
    if (k.name == name) return &k;
  return nullptr;
}

double eval_arithmetic(const std::string& expr) { return Arith(expr).parse(); }

std::string expand_template(const std::string& s, const std::map<std::string, std::string>& vars,
                            const std::string& field) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if ((c == '{' || c == '}') && i + 1 < s.size() && s[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c == '}') throw ConfigError(fmt::format("{}: unmatched '}}' in '{}'", field, s));
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t end = s.find('}', i);
    if (end == std::string::npos)
      throw ConfigError(fmt::format("{}: unclosed '{{' in '{}'", field, s));
    const std::string name = s.substr(i + 1, end - i - 1);
    const auto it = vars.find(name);
    if (it == vars.end()) {
      std::string list;
      for (const auto& [k, v] : vars) list += (list.empty() ? "" : ", ") + k;
      throw ConfigError(
          fmt::format("{}: placeholder '{{{}}}' names no knob (known: {})", field, name, list));
    }
    out += it->second;
    i = end;
  }
  return out;
}

std::map<std::string, std::string> spec_vars(const TuneSpec& spec, const Config& config,
                                             const std::filesystem::path& trial_dir) {
  std::map<std::string, std::string> vars;
  for (const SpecKnob& k : spec.knobs) {
    const auto it = config.find(k.name);
    vars[k.name] = k.text_of(it != config.end() ? it->second : k.baseline);
  }
  const auto steps = config.find("steps");
  vars["steps"] = steps != config.end() ? steps->second : std::to_string(spec.steps);
  vars["trial_dir"] = trial_dir.string();
  return vars;
}

std::vector<std::string> spec_command(const TuneSpec& spec, const Config& config,
                                      const std::filesystem::path& trial_dir) {
  const auto vars = spec_vars(spec, config, trial_dir);
  std::vector<std::string> cmd = {"/usr/bin/env", "-C", spec.dir.empty() ? "." : spec.dir.string()};
  for (const auto& [k, v] : spec.env) cmd.push_back(k + "=" + expand_template(v, vars, "env." + k));
  for (size_t i = 0; i < spec.command.size(); ++i) {
    std::string a = expand_template(spec.command[i], vars, fmt::format("command[{}]", i));
    if (!a.empty()) cmd.push_back(std::move(a));
  }
  return cmd;
}

TuneSpec parse_spec(const std::string& text, const std::string& label,
                    const std::filesystem::path& dir) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ConfigError(label + ": not valid JSON");
  if (!j.is_object()) throw ConfigError(label + ": expected a JSON object");
  check_fields(
      j, {"command", "env", "knobs", "steps", "timeout_s", "trace", "metrics", "tokens_per_step"},
      label);
  TuneSpec spec;
  spec.dir = dir;
  if (!j.contains("command") || !j.at("command").is_array() || j.at("command").empty())
    throw ConfigError(label + ": 'command' must be a non-empty array of strings");
  for (size_t i = 0; i < j.at("command").size(); ++i)
    spec.command.push_back(
        scalar_text(j.at("command")[i], fmt::format("{}: command[{}]", label, i)));
  if (j.contains("env")) {
    if (!j.at("env").is_object()) throw ConfigError(label + ": 'env' must be an object");
    for (const auto& [k, v] : j.at("env").items())
      spec.env[k] = scalar_text(v, fmt::format("{}: env.{}", label, k));
  }
  if (!j.contains("knobs") || !j.at("knobs").is_object() || j.at("knobs").empty())
    throw ConfigError(label + ": 'knobs' must be a non-empty object");
  for (const auto& [name, k] : j.at("knobs").items())
    spec.knobs.push_back(parse_knob(name, k, fmt::format("{}: knobs.{}", label, name)));
  if (j.contains("steps")) {
    if (!j.at("steps").is_number_integer() || j.at("steps").get<int64_t>() < 1 ||
        j.at("steps").get<int64_t>() > kMaxTrialSteps)
      throw ConfigError(
          fmt::format("{}: 'steps' must be an integer in 1..{}", label, kMaxTrialSteps));
    spec.steps = j.at("steps").get<int>();
  }
  if (j.contains("timeout_s")) {
    if (!j.at("timeout_s").is_number() || !(j.at("timeout_s").get<double>() > 0))
      throw ConfigError(label + ": 'timeout_s' must be a positive number");
    spec.timeout_s = j.at("timeout_s").get<double>();
  }
  for (const char* f : {"trace", "metrics", "tokens_per_step"}) {
    if (!j.contains(f)) continue;
    const std::string v = scalar_text(j.at(f), fmt::format("{}: {}", label, f));
    if (std::string(f) == "trace") spec.trace = v;
    if (std::string(f) == "metrics") spec.metrics = v;
    if (std::string(f) == "tokens_per_step") spec.tokens_per_step = v;
  }
  if (spec.metrics.empty())
    throw ConfigError(label + ": 'metrics' is required (a JSONL file with step and loss per line)");
  // Every template must expand at the baseline, and tokens_per_step must evaluate there.
  const auto vars = spec_vars(spec, spec_baseline(spec), "trial");
  (void)spec_command(spec, spec_baseline(spec), "trial");
  expand_template(spec.metrics, vars, label + ": metrics");
  if (!spec.trace.empty()) expand_template(spec.trace, vars, label + ": trace");
  if (!spec.tokens_per_step.empty()) {
    double t = 0;
    try {
      t = eval_arithmetic(expand_template(spec.tokens_per_step, vars, label + ": tokens_per_step"));
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("{}: tokens_per_step at the baseline: {}", label, e.what()));
    }
    if (!(t > 0))
      throw ConfigError(fmt::format("{}: tokens_per_step is {} at the baseline", label, t));
  }
  return spec;
}

TuneSpec load_spec(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw IoError(fmt::format("cannot read the spec {}", path.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  const auto dir = std::filesystem::absolute(path).parent_path();
  return parse_spec(ss.str(), path.string(), dir);
}

Config spec_baseline(const TuneSpec& spec) {
  Config c;
  for (const SpecKnob& k : spec.knobs) c[k.name] = k.baseline;
  return c;
}

std::vector<Dimension> spec_space(const TuneSpec& spec) {
  std::vector<Dimension> out;
  for (const SpecKnob& k : spec.knobs) {
    Dimension d;
    d.name = k.name;
    for (const auto& v : k.values) d.settings.push_back(Config{{k.name, v}});
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<Config> spec_patches(const TuneSpec& spec, const std::string& cls,
                                 const Config& incumbent) {
  std::vector<Config> out;
  for (const SpecKnob& k : spec.knobs) {
    if (std::find(k.fixes.begin(), k.fixes.end(), cls) == k.fixes.end()) continue;
    const auto it = incumbent.find(k.name);
    const std::string& now = it != incumbent.end() ? it->second : k.baseline;
    const auto at = std::find(k.values.begin(), k.values.end(), now);
    const auto pos = at == k.values.end() ? 0 : static_cast<size_t>(at - k.values.begin());
    // Nearest first, the later value before the earlier at equal distance.
    for (size_t d = 1; d < k.values.size(); ++d) {
      if (pos + d < k.values.size()) out.push_back(Config{{k.name, k.values[pos + d]}});
      if (pos >= d) out.push_back(Config{{k.name, k.values[pos - d]}});
    }
  }
  return out;
}

double spec_batch_scale(const TuneSpec& spec, const Config& knobs) {
  double scale = 1;
  for (const SpecKnob& k : spec.knobs) {
    if (!k.scales_batch) continue;
    const auto it = knobs.find(k.name);
    const std::string& v = it != knobs.end() ? it->second : k.baseline;
    try {
      scale *= eval_arithmetic(v);
    } catch (const ConfigError&) {
      // a non-numeric batch knob: the batch is assumed unchanged
    }
  }
  return scale;
}

}  // namespace ft::tuner

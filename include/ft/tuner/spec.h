// spec.h: a tuning spec for any training program (ft-tune --spec): its command template, knobs,
// outputs, and the trial and diagnosis that run it.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "ft/profiler/diagnosis.h"
#include "ft/tuner/search.h"
#include "ft/tuner/trial.h"

namespace ft::tuner {

// One knob of the program: the settings to try, the baseline's, and the findings it fixes.
struct SpecKnob {
  std::string name;
  std::vector<std::string> values;  // in the spec's order; numbers as JSON spells them
  // A value given as a map: value -> the text that replaces {name} ("" drops the argument).
  std::map<std::string, std::string> text;
  std::string baseline;
  std::vector<std::string> fixes;  // finding classes (data, precision, batch, memory, ...)
  bool scales_batch = false;       // the global batch changes with this knob
  const std::string& text_of(const std::string& value) const;
};

struct TuneSpec {
  std::vector<std::string> command;        // templates; an argument expanding to "" is dropped
  std::map<std::string, std::string> env;  // set for the program (templates too)
  std::vector<SpecKnob> knobs;             // in the spec's order
  int steps = 40;                          // {steps} unless the sweep sets a trial's length
  double timeout_s = 300;                  // a trial is killed after this
  std::string trace;                       // template: the Kineto trace file or folder
  std::string metrics;                     // template: JSONL with step and loss per line
  std::string tokens_per_step;             // arithmetic template; "" = metrics' tokens_per_s
  std::filesystem::path dir;               // the program runs here (the spec's folder)
  const SpecKnob* knob(const std::string& name) const;
};

// Parses a spec (JSON) and checks it: unknown fields, placeholders that name nothing, a
// baseline outside its values, an unknown finding class, a tokens_per_step that does not
// evaluate at the baseline are ConfigErrors naming `label` and the field.
TuneSpec parse_spec(const std::string& text, const std::string& label,
                    const std::filesystem::path& dir);
TuneSpec load_spec(const std::filesystem::path& path);  // IoError when unreadable

// The knobs at their baseline values.
Config spec_baseline(const TuneSpec& spec);
// Every knob as a dimension of single-knob settings (the grid space).
std::vector<Dimension> spec_space(const TuneSpec& spec);
// The patches that address a finding of class `cls`: for each knob whose fixes name it, its
// values other than `incumbent`'s, nearest in the spec's order first.
std::vector<Config> spec_patches(const TuneSpec& spec, const std::string& cls,
                                 const Config& incumbent);
// The product of the scales_batch knobs' numeric values (1 when none): verification runs of a
// configuration cover the same tokens as the baseline's.
double spec_batch_scale(const TuneSpec& spec, const Config& knobs);

// Replaces {name} by vars[name] ("{{" and "}}" are literal braces). A name not in vars is a
// ConfigError naming `field`.
std::string expand_template(const std::string& s, const std::map<std::string, std::string>& vars,
                            const std::string& field);
// +, -, *, / and parentheses over decimal numbers; a ConfigError on anything else.
double eval_arithmetic(const std::string& expr);

// The placeholders' values of a trial: every knob's text, {steps}, {trial_dir}.
std::map<std::string, std::string> spec_vars(const TuneSpec& spec, const Config& config,
                                             const std::filesystem::path& trial_dir);
// The program's command line of a trial: `env -C DIR K=V ... command...`.
std::vector<std::string> spec_command(const TuneSpec& spec, const Config& config,
                                      const std::filesystem::path& trial_dir);

// Runs the program with `config` in work_dir/<id>.<pid>/ and reads what it measured:
// throughput from the trace's steady steps x tokens_per_step (else the metrics' tokens_per_s),
// the loss curve from the metrics. A crash, a timeout, an out-of-memory exit (the log says
// "out of memory" or MemoryError), missing metrics or trace are failed trials with the reason;
// never throws for a failing program.
TrialResult run_spec_trial(const TuneSpec& spec, const std::string& id, const Config& config,
                           const std::filesystem::path& work_dir);

// Runs the program once with `config` and diagnoses its trace with `ft_diagnose` into
// dir/report.json; an existing dir/report.json (a resumed sweep) is read, not rerun. Throws
// IoError when the program or the diagnosis fails.
profiler::Diagnosis run_spec_diagnosis(const TuneSpec& spec,
                                       const std::filesystem::path& ft_diagnose,
                                       const std::filesystem::path& dir, const Config& config);

}  // namespace ft::tuner

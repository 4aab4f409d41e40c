// train_config_test.cpp: ft-train's option table, --config file errors (FILE:LINE) and the
// shortest form of float settings in its JSON and config text.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/trainer/train_config.h"
#include "reference/run_cli.h"
#include "test_scratch.h"

namespace ft::trainer {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  return ft::test::scratch_dir("ft_train_config_test_" + name);
}

TrainConfig parse(std::vector<std::string> words) {
  words.insert(words.begin(), "ft-train");
  std::vector<const char*> argv;
  for (const auto& w : words) argv.push_back(w.c_str());
  return *parse_train_args(static_cast<int>(argv.size()), argv.data());
}

std::string error_of(const std::vector<std::string>& words) {
  try {
    parse(words);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(OptionTable, ListsEveryOptionWithTypeDefaultAndHelp) {
  const auto& table = option_table();
  std::set<std::string> names;
  for (const auto& o : table) {
    EXPECT_TRUE(names.insert(o.name).second) << "listed twice: " << o.name;
    EXPECT_TRUE(o.type == "int" || o.type == "float" || o.type == "bool" || o.type == "string")
        << o.name << ": " << o.type;
    EXPECT_FALSE(o.help.empty()) << o.name;
  }
  for (const char* n : {"help", "config", "layers", "micro-batch", "lr", "precision", "quiet",
                        "no-overlap", "comm-timeout", "straggle-work", "metrics"}) {
    EXPECT_TRUE(names.count(n)) << n;
  }
  const auto get = [](const char* n) {
    const OptionInfo* o = find_option(n);
    EXPECT_NE(o, nullptr) << n;
    return o ? *o : OptionInfo{};
  };
  EXPECT_EQ(find_option("no-such-flag"), nullptr);
  EXPECT_EQ(get("micro-batch").type, "int");
  EXPECT_EQ(get("micro-batch").default_value, "8");
  EXPECT_EQ(get("seed").type, "int");
  EXPECT_EQ(get("seed").default_value, "1337");
  EXPECT_EQ(get("lr").type, "float");
  EXPECT_EQ(get("lr").default_value, "0.001");  // the float's shortest form
  EXPECT_EQ(get("min-lr").default_value, "0.0001");
  EXPECT_EQ(get("bucket-mb").default_value, "25");
  EXPECT_EQ(get("allocator-caching").type, "bool");
  EXPECT_EQ(get("allocator-caching").default_value, "true");
  EXPECT_EQ(get("allocator-huge-pages").type, "bool");
  EXPECT_EQ(get("allocator-huge-pages").default_value, "true");
  EXPECT_EQ(get("quiet").type, "bool");  // a switch
  EXPECT_EQ(get("quiet").default_value, "false");
  EXPECT_EQ(get("help").type, "bool");
  EXPECT_EQ(get("metrics").type, "string");
  EXPECT_EQ(get("metrics").default_value, "");
  EXPECT_EQ(get("precision").default_value, "fp32");
  EXPECT_EQ(get("precision").allowed, (std::vector<std::string>{"fp32", "bf16", "fp16"}));
  EXPECT_EQ(get("zero").allowed, (std::vector<std::string>{"0", "1", "2", "3"}));
  EXPECT_TRUE(get("micro-batch").allowed.empty());
}

// The allowed values are what the parsers take: each one parses, its help names it, and a
// value outside them is rejected.
TEST(OptionTable, AllowedValuesAreWhatParseTrainArgsAccepts) {
  int with_choices = 0;
  for (const auto& o : option_table()) {
    if (o.allowed.empty()) continue;
    ++with_choices;
    EXPECT_NE(std::find(o.allowed.begin(), o.allowed.end(), o.default_value), o.allowed.end())
        << o.name << "'s default is one of its values";
    for (const auto& v : o.allowed) {
      std::vector<std::string> words{"--" + o.name, v};
      if (o.name == "zero" && v != "0") words.insert(words.end(), {"--dp", "2"});
      if (o.name == "tokenizer" && v == "gpt2") continue;  // needs vocabulary files to load
      EXPECT_NO_THROW(parse(words)) << o.name << " " << v;
      EXPECT_NE(o.help.find(v), std::string::npos) << o.name << "'s help names " << v;
    }
    if (o.name != "tokenizer") {  // the tokenizer is checked when the data loads
      EXPECT_THROW(parse({"--" + o.name, "bogus"}), ConfigError) << o.name;
    }
  }
  EXPECT_EQ(with_choices, 7);
}

TEST(TrainConfig, FloatsShowTheirShortestForm) {
  const TrainConfig c = parse({"--lr", "0.001", "--weight-decay", "0.1", "--clip", "0.3"});
  const auto j = c.to_json();
  EXPECT_EQ(j.at("lr").dump(), "0.001");
  EXPECT_EQ(j.at("min_lr").dump(), "0.0001");
  EXPECT_EQ(j.at("weight_decay").dump(), "0.1");
  EXPECT_EQ(j.at("clip").dump(), "0.3");
  EXPECT_EQ(j.at("loss_scale").dump(), "65536.0");
  const std::string cfg = c.to_config_file();
  EXPECT_NE(cfg.find("\nlr = 0.001\n"), std::string::npos) << cfg;
  EXPECT_NE(cfg.find("\nclip = 0.3\n"), std::string::npos) << cfg;
  // The value is the same float: the round trip through the text changes nothing.
  EXPECT_EQ(parse({"--lr", j.at("lr").dump()}).lr, c.lr);
}

TEST(TrainConfig, CommandLineErrorsCarryNoProgramPrefix) {
  const std::string e = error_of({"--no-such-flag"});
  EXPECT_EQ(e.rfind("unrecognised option '--no-such-flag'", 0), 0u) << e;
  EXPECT_EQ(error_of({"--micro-batch", "many"}).find("ft-train"), std::string::npos);
}

TEST(TrainConfig, ConfigFileErrorsNameTheFileAndLine) {
  const fs::path d = temp_dir("cfg");
  const std::string path = (d / "run.cfg").string();
  const auto error_in = [&](const std::string& text) {
    write_file_atomic(path, text);
    return error_of({"--config", path});
  };
  EXPECT_EQ(error_in("layers = 1\n# a comment\nbogus = 3\n"),
            path + ":3: unrecognised option 'bogus'");
  EXPECT_EQ(error_in("layers = 1\nheads = two\n").rfind(path + ":2: ", 0), 0u);
  EXPECT_NE(error_in("layers = 1\nheads = two\n").find("heads"), std::string::npos);
  EXPECT_EQ(error_in("layers 1\n").rfind(path + ":1: ", 0), 0u);
  EXPECT_EQ(error_in("steps = 2\n\nsteps = 3\n"),
            path + ":3: 'steps' is set again (first on line 1)");
  EXPECT_EQ(error_in("[training]\nsteps = 2\n").rfind(path + ":1: [section]", 0), 0u);
  EXPECT_EQ(error_of({"--config", (d / "missing.cfg").string()}),
            "cannot open config file '" + (d / "missing.cfg").string() + "'");
  // A good file: its settings apply, and flags on the command line win.
  write_file_atomic(path, "layers = 1\n  heads = 2 \nchannels = 32\nsteps = 3\n");
  const TrainConfig c = parse({"--config", path, "--steps", "5"});
  EXPECT_EQ(c.model.num_layers, 1);
  EXPECT_EQ(c.model.num_heads, 2);
  EXPECT_EQ(c.model.channels, 32);
  EXPECT_EQ(c.steps, 5);
}

// What the user sees: one "ft-train: error:" and then FILE:LINE.
TEST(TrainConfig, FtTrainReportsABrokenConfigFileOnce) {
  const fs::path d = temp_dir("cli");
  const std::string path = (d / "broken.cfg").string();
  write_file_atomic(path, "layers = 1\nmicro_batch = 4\n");
  const auto r = ft::testing::run_cli("ft-train", "--config " + path);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("ft-train: error: " + path + ":2: unrecognised option 'micro_batch'"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("ft-train: error: ft-train"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ft::trainer

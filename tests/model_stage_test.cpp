// model_stage_test.cpp: in-process pipeline stages (1F1B via queues) equal the whole model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "ft/core/allocator.h"
#include "ft/core/error.h"
#include "ft/core/rng.h"
#include "ft/trainer/model.h"
#include "ft/trainer/pipeline.h"

namespace ft::trainer {
namespace {

GptConfig small_config(int layers) {
  GptConfig g;
  g.vocab_size = 60;  // padded to 64
  g.padded_vocab = 64;
  g.channels = 16;
  g.num_heads = 2;
  g.num_layers = layers;
  g.max_seq_len = 8;
  return g;
}

TEST(PipelineSchedule, LayerSplitCoversTheModelOnce) {
  for (int L : {2, 3, 4, 7, 12}) {
    for (int p = 1; p <= L; ++p) {
      int next = 0;
      for (int s = 0; s < p; ++s) {
        const StageLayers r = pipeline_stage_layers(L, p, s);
        EXPECT_EQ(r.first, next) << L << " " << p << " " << s;
        EXPECT_GE(r.count, L / p);
        EXPECT_LE(r.count, L / p + 1);
        next = r.first + r.count;
      }
      EXPECT_EQ(next, L);
    }
  }
  try {
    pipeline_stage_layers(2, 4, 0);
    FAIL() << "fewer layers than stages must be an error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--pp 4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--layers 2"), std::string::npos) << e.what();
  }
}

TEST(PipelineSchedule, OneFOneBOrderAndInFlight) {
  for (int p = 1; p <= 5; ++p) {
    for (int s = 0; s < p; ++s) {
      for (int m = 1; m <= 9; ++m) {
        const auto ops = one_f_one_b(p, s, m);
        ASSERT_EQ(ops.size(), 2u * m);
        int f = 0, b = 0, most = 0;
        for (const PipeOp& op : ops) {
          if (op.kind == PipeOp::kForward) {
            ASSERT_EQ(op.micro, f++);  // forwards and backwards each in order
          } else {
            ASSERT_EQ(op.micro, b++);
            ASSERT_LT(op.micro, f);  // never before its forward
          }
          most = std::max(most, f - b);
        }
        EXPECT_EQ(most, pipeline_in_flight(p, s, m)) << p << " " << s << " " << m;
        // Warm-up: p - s - 1 forwards before the first backward (all of them when m is smaller).
        int warm = 0;
        while (ops[static_cast<size_t>(warm)].kind == PipeOp::kForward) ++warm;
        EXPECT_EQ(warm, std::min(p - s, m)) << p << " " << s << " " << m;
      }
    }
  }
}

// Event simulation of p stages running 1F1B with in-order buffered channels and
// zero-cost transfers: every stage finishes (no deadlock) and the step takes
// (m + p - 1)(tf + tb), i.e. a bubble of (p - 1)/m of the ideal m(tf + tb).
TEST(PipelineSchedule, SimulatedMakespanMatchesTheory) {
  const double tf = 1.0, tb = 2.0;
  for (int p = 1; p <= 4; ++p) {
    for (int m = 1; m <= 8; ++m) {
      std::vector<std::vector<PipeOp>> sched;
      for (int s = 0; s < p; ++s) sched.push_back(one_f_one_b(p, s, m));
      std::vector<size_t> pc(p, 0);
      std::vector<double> clock(p, 0);
      // Completion times of forward k on stage s and backward k on stage s.
      std::vector<std::vector<double>> fdone(p, std::vector<double>(m, -1)),
          bdone(p, std::vector<double>(m, -1));
      bool progress = true;
      while (progress) {
        progress = false;
        for (int s = 0; s < p; ++s) {
          if (pc[s] == sched[s].size()) continue;
          const PipeOp op = sched[s][pc[s]];
          double ready;
          if (op.kind == PipeOp::kForward) {
            ready = s == 0 ? 0 : fdone[s - 1][op.micro];
          } else {
            ready = s == p - 1 ? 0 : bdone[s + 1][op.micro];
          }
          if (ready < 0) continue;  // input not produced yet
          const double start = std::max(clock[s], ready);
          clock[s] = start + (op.kind == PipeOp::kForward ? tf : tb);
          (op.kind == PipeOp::kForward ? fdone : bdone)[s][op.micro] = clock[s];
          ++pc[s];
          progress = true;
        }
      }
      for (int s = 0; s < p; ++s)
        ASSERT_EQ(pc[s], sched[s].size()) << "deadlock p=" << p << " m=" << m;
      const double makespan = *std::max_element(clock.begin(), clock.end());
      EXPECT_DOUBLE_EQ(makespan, (m + p - 1) * (tf + tb)) << "p=" << p << " m=" << m;
      const double ideal = m * (tf + tb);
      EXPECT_DOUBLE_EQ((makespan - ideal) / ideal, static_cast<double>(p - 1) / m);
    }
  }
}

// Random, non-trivial parameters (LayerNorm weights away from 1, biases non-zero).
void randomize(GptModel& m, uint64_t seed) {
  m.init_weights(seed);
  Rng rng(seed + 1);
  for (int i = 0; i < kNumParamTensors; ++i) {
    float* p = m.param(i);
    size_t n = m.layout().sizes[i];
    if (i == kWte) n = static_cast<size_t>(m.config().vocab_size) * m.config().channels;
    for (size_t j = 0; j < n; ++j) p[j] += static_cast<float>(rng.normal() * 0.1);
  }
  m.refresh_low_precision();
}

// Copies the whole model's parameters into a stage (its slice of each tensor).
void copy_slice(const GptModel& whole, GptModel& stage) {
  for (int i = 0; i < kNumParamTensors; ++i) {
    std::memcpy(stage.param(i),
                whole.params() + whole.layout().offsets[i] + stage.stage_slice_offset(i),
                stage.layout().sizes[i] * sizeof(float));
  }
  stage.refresh_low_precision();
}

struct StageRun {
  double loss_sum = 0;
  double max_rel_diff = 0;  // over tensors: max |stage - whole| / max |whole|
};

// Runs m micro-batches through p in-process stages in 1F1B order (round-robin
// over the stages, activations and gradients through queues) and the whole
// model through forward_backward; compares losses and every gradient.
StageRun run_stages(const GptConfig& g, int p, int m, const ModelOptions& opt) {
  const int B = 2, T = 8, C = g.channels;
  const size_t n = static_cast<size_t>(B) * T * C;
  CachingAllocator alloc;
  GptModel whole(g, alloc, opt);
  randomize(whole, 7);
  std::vector<std::unique_ptr<GptModel>> st;
  for (int s = 0; s < p; ++s) {
    st.push_back(std::make_unique<GptModel>(g, alloc, opt, pipeline_sharding(g.num_layers, p, s)));
    copy_slice(whole, *st.back());
  }
  std::vector<std::vector<int32_t>> in(m), tg(m);
  Rng rng(99);
  for (int k = 0; k < m; ++k) {
    in[k].resize(static_cast<size_t>(B) * T);
    tg[k].resize(in[k].size());
    for (auto& x : in[k]) x = static_cast<int32_t>(rng.next_u64() % g.vocab_size);
    for (auto& x : tg[k]) x = static_cast<int32_t>(rng.next_u64() % g.vocab_size);
  }
  const float dloss = 1.0f / (static_cast<float>(B) * T * m);
  double whole_loss = 0;
  for (int k = 0; k < m; ++k) {
    whole_loss += whole.forward_backward(in[k].data(), tg[k].data(), B, T, dloss, k == 0);
  }

  std::vector<std::vector<PipeOp>> sched;
  std::vector<int> slots;
  for (int s = 0; s < p; ++s) {
    sched.push_back(one_f_one_b(p, s, m));
    slots.push_back(pipeline_in_flight(p, s, m));
    st[s]->stage_prepare(slots[s], B, T);
  }
  std::vector<std::deque<std::vector<float>>> acts(p), grads(p);  // into stage s
  std::vector<size_t> pc(p, 0);
  StageRun r;
  double stage_loss = 0;
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      if (pc[s] == sched[s].size()) continue;
      const PipeOp op = sched[s][pc[s]];
      GptModel& md = *st[s];
      const int slot = op.micro % slots[s];
      if (op.kind == PipeOp::kForward) {
        if (s > 0) {
          if (acts[s].empty()) continue;
          std::memcpy(md.stage_input(slot), acts[s].front().data(), n * sizeof(float));
          acts[s].pop_front();
        }
        md.stage_forward(slot, in[op.micro].data(), tg[op.micro].data());
        if (s + 1 < p) acts[s + 1].emplace_back(md.stage_output(slot), md.stage_output(slot) + n);
      } else {
        if (s + 1 < p) {
          if (grads[s].empty()) continue;
          std::memcpy(md.stage_grad(), grads[s].front().data(), n * sizeof(float));
          grads[s].pop_front();
        }
        stage_loss += md.stage_backward(slot, dloss, op.micro == 0);
        if (s > 0) grads[s - 1].emplace_back(md.stage_grad(), md.stage_grad() + n);
      }
      ++pc[s];
      progress = true;
    }
  }
  for (int s = 0; s < p; ++s) EXPECT_EQ(pc[s], sched[s].size()) << "deadlock at stage " << s;
  // The tied embedding: the first and last stage's wte gradients add up.
  GptModel& first = *st[0];
  GptModel& last = *st[p - 1];
  if (p > 1) {
    for (size_t j = 0; j < first.layout().sizes[kWte]; ++j) {
      const float sum = first.grad(kWte)[j] + last.grad(kWte)[j];
      first.grad(kWte)[j] = last.grad(kWte)[j] = sum;
    }
  }
  r.loss_sum = stage_loss;
  EXPECT_NEAR(stage_loss, whole_loss, 1e-6 * m)
      << "losses: stages " << stage_loss << " whole " << whole_loss;
  for (int s = 0; s < p; ++s) {
    const GptModel& md = *st[s];
    for (int i = 0; i < kNumParamTensors; ++i) {
      const size_t len = md.layout().sizes[i];
      if (len == 0) continue;
      const float* ref = whole.grads() + whole.layout().offsets[i] + md.stage_slice_offset(i);
      const float* got = md.grads() + md.layout().offsets[i];
      double maxdiff = 0, maxref = 0;
      for (size_t j = 0; j < len; ++j) {
        maxdiff = std::max(maxdiff, std::fabs(static_cast<double>(got[j]) - ref[j]));
        maxref = std::max(maxref, std::fabs(static_cast<double>(ref[j])));
      }
      r.max_rel_diff = std::max(r.max_rel_diff, maxref > 0 ? maxdiff / maxref : maxdiff);
    }
  }
  std::printf(
      "p=%d m=%d precision=%s checkpoint=%s: loss %.9f vs %.9f, max relative grad diff %.3g\n", p,
      m, precision_name(opt.precision), checkpointing_name(opt.checkpointing), stage_loss,
      whole_loss, r.max_rel_diff);
  return r;
}

TEST(ModelStage, InitEqualsTheWholeModelSlice) {
  const GptConfig g = small_config(4);
  CachingAllocator alloc;
  GptModel whole(g, alloc, {});
  whole.init_weights(1337);
  for (int p : {2, 3, 4}) {
    for (int s = 0; s < p; ++s) {
      GptModel st(g, alloc, {}, pipeline_sharding(4, p, s));
      st.init_weights(1337);
      EXPECT_EQ(st.layout().sizes[kWte] > 0, s == 0 || s == p - 1);
      EXPECT_EQ(st.layout().sizes[kWpe] > 0, s == 0);
      EXPECT_EQ(st.layout().sizes[kLnfw] > 0, s == p - 1);
      for (int i = 0; i < kNumParamTensors; ++i) {
        const size_t len = st.layout().sizes[i];
        ASSERT_EQ(0,
                  std::memcmp(st.param(i),
                              whole.params() + whole.layout().offsets[i] + st.stage_slice_offset(i),
                              len * sizeof(float)))
            << "p=" << p << " stage " << s << " tensor " << ParamLayout::name(i);
      }
    }
  }
}

// fp32 sums in a different order (the tied wte gradient adds the embedding part
// and the head part separately): 1e-5 of each tensor's largest gradient.
constexpr double kFp32Tol = 1e-5;

TEST(ModelStage, TwoStagesEqualTheWholeModel) {
  EXPECT_LE(run_stages(small_config(2), 2, 4, {}).max_rel_diff, kFp32Tol);
  EXPECT_LE(run_stages(small_config(3), 2, 1, {}).max_rel_diff, kFp32Tol);
}

TEST(ModelStage, FourStagesEqualTheWholeModel) {
  EXPECT_LE(run_stages(small_config(4), 4, 6, {}).max_rel_diff, kFp32Tol);
  EXPECT_LE(run_stages(small_config(5), 4, 2, {}).max_rel_diff, kFp32Tol);  // m < p
}

TEST(ModelStage, BlockRecomputeWithSeveralInFlight) {
  ModelOptions o;
  o.checkpointing = Checkpointing::kBlock;
  EXPECT_LE(run_stages(small_config(4), 2, 4, o).max_rel_diff, kFp32Tol);
  EXPECT_LE(run_stages(small_config(6), 3, 5, o).max_rel_diff, kFp32Tol);
}

TEST(ModelStage, LowPrecisionAndNaiveAttention) {
  ModelOptions o;
  o.precision = Precision::kBf16;
  // Same bf16 operands on both sides: only the summation order differs.
  EXPECT_LE(run_stages(small_config(4), 2, 3, o).max_rel_diff, 1e-4);
  o.precision = Precision::kFp16;
  o.attention = AttentionImpl::kMaterialized;
  EXPECT_LE(run_stages(small_config(4), 2, 3, o).max_rel_diff, 1e-4);
}

TEST(ModelStage, GradReadyHookSeesLocalBlocksThenTheRest) {
  const GptConfig g = small_config(4);
  CachingAllocator alloc;
  GptModel st(g, alloc, {}, pipeline_sharding(4, 2, 1));
  st.init_weights(3);
  std::vector<int> seen;
  st.set_grad_ready_hook([&](int l) { seen.push_back(l); });
  std::vector<int32_t> tok(16, 5);
  st.stage_prepare(1, 2, 8);
  std::memset(st.stage_input(0), 0, 2 * 8 * 16 * sizeof(float));
  st.stage_forward(0, nullptr, tok.data());
  st.stage_backward(0, 1.0f / 16, true);
  EXPECT_EQ(seen, (std::vector<int>{1, 0, -1}));
}

TEST(ModelStage, ClearErrors) {
  const GptConfig g = small_config(2);
  CachingAllocator alloc;
  ModelSharding bad;
  bad.first_layer = 1;
  bad.num_layers = 2;
  EXPECT_THROW(GptModel(g, alloc, {}, bad), ConfigError);
  GptModel st(g, alloc, {}, pipeline_sharding(2, 2, 0));
  std::vector<int32_t> tok(16, 1);
  EXPECT_THROW(st.forward_backward(tok.data(), tok.data(), 2, 8, 1.0f, true), Error);
  EXPECT_THROW(st.stage_forward(0, tok.data(), nullptr), Error);  // not prepared
  st.stage_prepare(1, 2, 8);
  EXPECT_THROW(st.stage_backward(0, 1.0f, true), Error);  // no forward
  st.stage_forward(0, tok.data(), nullptr);
  EXPECT_THROW(st.stage_forward(0, tok.data(), nullptr), Error);  // slot busy
}

}  // namespace
}  // namespace ft::trainer

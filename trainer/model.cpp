// model.cpp: GPT-2 forward and backward over the CPU ops, with optional block recompute.
#include "ft/trainer/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ft/core/annotate.h"
#include "ft/core/error.h"
#include "ft/core/rng.h"
#include "ft/trainer/ops.h"
#include "ft/trainer/tensor_parallel.h"
#include "model_internal.h"

namespace ft::trainer {

Checkpointing parse_checkpointing(const std::string& s) {
  if (s == "none") return Checkpointing::kNone;
  if (s == "block") return Checkpointing::kBlock;
  throw ConfigError("unknown --checkpoint '" + s + "' (expected none or block)");
}
const char* checkpointing_name(Checkpointing c) {
  return c == Checkpointing::kBlock ? "block" : "none";
}
AttentionImpl parse_attention(const std::string& s) {
  if (s == "flash" || s == "tiled") return AttentionImpl::kFlash;
  if (s == "naive" || s == "materialized") return AttentionImpl::kMaterialized;
  throw ConfigError("unknown --attention '" + s + "' (expected auto, flash or naive)");
}
const char* attention_name(AttentionImpl a) {
  return a == AttentionImpl::kFlash ? "flash" : "naive";
}
AttentionImpl choose_attention(int seq_len, int head_size) {
  return seq_len <= 4 * head_size ? AttentionImpl::kMaterialized : AttentionImpl::kFlash;
}

GptModel::GptModel(const GptConfig& config, CachingAllocator& alloc, const ModelOptions& options,
                   const ModelSharding& sharding)
    : config_(config), alloc_(alloc), options_(options), gemm_(alloc), sharding_(sharding) {
  config_.validate();
  sharding_ = resolve_stage(config_, sharding_);
  layout_ = make_stage_layout(config_, sharding_);
  setup_tensor_parallel();  // layout_ becomes this rank's shard when ModelSharding::tp > 1
  if (options.lora.enabled()) setup_lora();  // the block linears leave layout_ for NF4
  if (sharding_.zero3) {
    if (!whole_model() || lora_) {
      throw ConfigError("--zero 3 runs on the whole model (no --pp or --qlora)");
    }
    // The block tensors leave the flat buffers: a BlockParams holds them.
    layout_ = layout_.without(ParamLayout::per_block);
  }
  params_ = Buffer<float>(alloc_, layout_.total, "params");
  // QLoRA: every tensor in layout_ is frozen; the adapters hold their own gradients.
  const size_t ngrads = lora_ ? 0 : layout_.total;
  grads_ = Buffer<float>(alloc_, ngrads, "grads");
  std::memset(params_.data(), 0, layout_.total * sizeof(float));
  if (ngrads) std::memset(grads_.data(), 0, ngrads * sizeof(float));
  set_options(options);
}

GptModel::~GptModel() = default;

void GptModel::set_options(const ModelOptions& o) {
  if (o.lora.enabled() != (lora_ != nullptr) ||
      (lora_ && (o.precision != options_.precision || o.lora.rank != lora_->cfg.rank))) {
    throw ConfigError("QLoRA (its rank, its precision) is fixed when the model is built");
  }
  options_ = o;
  const size_t elem = o.precision == Precision::kBf16 ? 2 : 4;
  params_lp_.reset();
  if (o.precision != Precision::kFp32) {
    params_lp_ = Buffer<char>(alloc_, layout_.total * elem, "params_lp");
    refresh_low_precision();
  }
}

namespace {
constexpr int kMatmulWeights[] = {kWte, kQkvw, kAttprojw, kFcw, kFcprojw};
}

void GptModel::refresh_low_precision() {
  if (options_.precision == Precision::kFp32) return;
  for (int idx : kMatmulWeights) {
    const size_t off = layout_.offsets[idx], n = layout_.sizes[idx];
    if (options_.precision == Precision::kBf16) {
      fp32_to_bf16(reinterpret_cast<uint16_t*>(params_lp_.data()) + off, params_.data() + off, n);
    } else {
      round_through_fp16(reinterpret_cast<float*>(params_lp_.data()) + off, params_.data() + off,
                         n);
    }
  }
}

void GptModel::refresh_low_precision(size_t offset, size_t n) {
  if (options_.precision == Precision::kFp32) return;
  for (int idx : kMatmulWeights) {
    const size_t lo = std::max(offset, layout_.offsets[idx]);
    const size_t hi = std::min(offset + n, layout_.offsets[idx] + layout_.sizes[idx]);
    if (lo >= hi) continue;
    if (options_.precision == Precision::kBf16) {
      fp32_to_bf16(reinterpret_cast<uint16_t*>(params_lp_.data()) + lo, params_.data() + lo,
                   hi - lo);
    } else {
      round_through_fp16(reinterpret_cast<float*>(params_lp_.data()) + lo, params_.data() + lo,
                         hi - lo);
    }
  }
}

const float* GptModel::bparam(int index, int l) {
  if (blocks_) return blocks_->param(index, l);
  return param(index) + layout_.sizes[index] / local_layers() * static_cast<size_t>(l);
}

float* GptModel::bgrad(int index, int l) {
  if (lora_) return nullptr;  // QLoRA: frozen
  if (blocks_) return blocks_->grad(index, l);
  return grad(index) + layout_.sizes[index] / local_layers() * static_cast<size_t>(l);
}

const void* GptModel::lp_weight(int index, int layer) {
  if (options_.precision == Precision::kFp32) return nullptr;
  if (blocks_ && index != kWte) return blocks_->param_lp(index, layer);  // ZeRO-3: gathered
  const size_t per = index == kWte ? layout_.sizes[index] : layout_.sizes[index] / local_layers();
  const size_t off = layout_.offsets[index] + per * static_cast<size_t>(layer);
  const size_t elem = options_.precision == Precision::kBf16 ? 2 : 4;
  return params_lp_.data() + off * elem;
}

void GptModel::init_weights(uint64_t seed) {
  Rng rng(seed);
  const int L = config_.num_layers;
  const double kStd = 0.02, kProjStd = 0.02 / std::sqrt(2.0 * L);
  // A pipeline stage draws the whole model's random stream and keeps its slice, and a
  // tensor-parallel rank keeps its shard of that (one tensor at a time), so that the
  // ranks together equal the single-process model.
  const bool direct = whole_model() && tp_ == 1 && !lora_ && !sharding_.zero3;
  const ParamLayout full = ParamLayout::make(config_);
  std::vector<float> scratch;
  for (int i = 0; i < kNumParamTensors; ++i) {
    if (!direct) scratch.resize(full.sizes[i]);
    float* p = direct ? param(i) : scratch.data();
    const size_t n = full.sizes[i];
    if (i == kLn1w || i == kLn2w || i == kLnfw) {
      for (size_t j = 0; j < n; ++j) p[j] = 1.0f;
    } else if (i == kWte || i == kWpe || i == kQkvw || i == kFcw || i == kAttprojw ||
               i == kFcprojw) {
      const double std = (i == kAttprojw || i == kFcprojw) ? kProjStd : kStd;
      size_t limit = n;
      if (i == kWte) limit = static_cast<size_t>(config_.vocab_size) * config_.channels;
      for (size_t j = 0; j < limit; ++j) p[j] = static_cast<float>(rng.normal() * std);
      for (size_t j = limit; j < n; ++j) p[j] = 0.0f;  // padded vocabulary rows
    } else {
      for (size_t j = 0; j < n; ++j) p[j] = 0.0f;
    }
    if (!direct) {
      const float* stage = p + stage_slice_offset(i);  // full_layout_.sizes[i] elements
      if ((tp_ > 1 && tp_sharded(i)) || lora_ || sharding_.zero3) {
        load_full_tensor(i, stage);
      } else {
        std::memcpy(param(i), stage, layout_.sizes[i] * sizeof(float));
      }
    }
  }
  if (lora_) lora_init(seed);
  refresh_low_precision();
}

void GptModel::layer_forward(int l, const float* x, float* x_out, LayerActs& a, int B, int T) {
  FT_RANGE("fwd.block", RangeKind::kCompute, l);
  // Tensor parallel (tp_ > 1): QKV and FC1 are column-parallel (this rank's Cl = C/t
  // output features, NHl heads), the attention projection and FC2 row-parallel (their
  // partial outputs are all-reduced, then the replicated bias is added once).
  const int C = config_.channels, N = B * T;
  const int Cl = C / tp_, NHl = config_.num_heads / tp_;
  const bool tp = tp_ > 1;
  ops::layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, bparam(kLn1w, l),
                         bparam(kLn1b, l), N, C);
  linear_forward(kQkvw, l, a.qkv.data(), a.ln1.data(), bparam(kQkvb, l), N, C, 3 * Cl);
  if (options_.attention == AttentionImpl::kFlash) {
    ops::attention_flash_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, Cl, NHl);
  } else {
    ops::attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, Cl, NHl);
  }
  linear_forward(kAttprojw, l, a.res2.data(), a.atty.data(), tp ? nullptr : bparam(kAttprojb, l), N,
                 Cl, C);
  if (tp) tp_reduce_output(a.res2.data(), bparam(kAttprojb, l), N, C);
  ops::residual_forward(a.res2.data(), a.res2.data(), x, static_cast<size_t>(N) * C);
  ops::layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(),
                         bparam(kLn2w, l), bparam(kLn2b, l), N, C);
  linear_forward(kFcw, l, a.fch.data(), a.ln2.data(), bparam(kFcb, l), N, C, 4 * Cl);
  ops::gelu_forward(a.fch_gelu.data(), a.fch.data(), static_cast<size_t>(N) * 4 * Cl);
  linear_forward(kFcprojw, l, x_out, a.fch_gelu.data(), tp ? nullptr : bparam(kFcprojb, l), N,
                 4 * Cl, C);
  if (tp) tp_reduce_output(x_out, bparam(kFcprojb, l), N, C);
  ops::residual_forward(x_out, x_out, a.res2.data(), static_cast<size_t>(N) * C);
}

void GptModel::layer_backward(int l, const float* x, float* dres, LayerActs& a, int B, int T,
                              bool first_micro) {
  FT_RANGE("bwd.block", RangeKind::kCompute, l);
  // Tensor parallel: local shapes as in layer_forward; the gradients of the LN2 and LN1
  // outputs (inputs of the column-parallel FC1 and QKV) are partial sums, all-reduced.
  // dres is identical on every TP rank, so the replicated tensors' gradients are too.
  const int C = config_.channels, N = B * T;
  const int Cl = C / tp_, NHl = config_.num_heads / tp_;
  const bool tp = tp_ > 1;
  const size_t BT = static_cast<size_t>(N);
  // ZeRO-3 reduces every micro-batch's block gradients from a fresh buffer: written, not summed.
  const bool acc = !first_micro && !blocks_;
  auto g = [&](int index) { return bgrad(index, l); };
  Buffer<float> dbt(alloc_, BT * C, "grad.dbt");  // (B, T, C) scratch
  // (B, T, 4Cl) scratch, also dqkv (B, T, 3Cl)
  Buffer<float> dbig(alloc_, BT * 4 * Cl, "grad.dbig");
  // MLP: x_out = res2 + fch_gelu @ fcprojw^T + b
  linear_backward(kFcprojw, l, dbig.data(), g(kFcprojw), g(kFcprojb), dres, a.fch_gelu.data(), N,
                  4 * Cl, C, acc);
  ops::gelu_backward(dbig.data(), a.fch.data(), dbig.data(), BT * 4 * Cl);
  linear_backward(kFcw, l, dbt.data(), g(kFcw), g(kFcb), dbig.data(), a.ln2.data(), N, C, 4 * Cl,
                  acc);
  if (tp) tp_reduce_input_grad(dbt.data(), N, C);
  ops::layernorm_backward(dres, g(kLn2w), g(kLn2b), dbt.data(), a.res2.data(), bparam(kLn2w, l),
                          a.ln2_mean.data(), a.ln2_rstd.data(), N, C);
  // Attention: res2 = x + atty @ attprojw^T + b
  linear_backward(kAttprojw, l, dbt.data(), g(kAttprojw), g(kAttprojb), dres, a.atty.data(), N, Cl,
                  C, acc);
  float* dqkv = dbig.data();  // (B, T, 3Cl)
  if (options_.attention == AttentionImpl::kFlash) {
    ops::attention_flash_backward(dqkv, dbt.data(), a.qkv.data(), a.atty.data(), a.att.data(), B, T,
                                  Cl, NHl);
  } else {
    // The kernel keeps its (T, T) gradient tile per thread in L2; no (B, NH, T, T) scratch.
    ops::attention_backward(dqkv, nullptr, dbt.data(), a.qkv.data(), a.att.data(), B, T, Cl, NHl);
  }
  linear_backward(kQkvw, l, dbt.data(), g(kQkvw), g(kQkvb), dqkv, a.ln1.data(), N, C, 3 * Cl, acc);
  if (tp) tp_reduce_input_grad(dbt.data(), N, C);
  ops::layernorm_backward(dres, g(kLn1w), g(kLn1b), dbt.data(), x, bparam(kLn1w, l),
                          a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
}

void GptModel::run_forward(const int32_t* inputs, int B, int T, Workspace& w, bool keep) {
  const int C = config_.channels, NH = config_.num_heads, L = config_.num_layers;
  const int N = B * T;
  if (T > config_.max_seq_len) {
    throw ConfigError("sequence length " + std::to_string(T) + " exceeds the model's maximum " +
                      std::to_string(config_.max_seq_len));
  }
  const size_t BT = static_cast<size_t>(N);
  const bool per_layer = keep && options_.checkpointing == Checkpointing::kNone;
  if (lora_) lora_->training = keep;  // adapter dropout in training forwards only
  // Keep every block input when training; ping-pong two buffers for eval.
  const int nx = keep ? L + 1 : 2;
  w.xs.clear();
  for (int i = 0; i < nx; ++i) w.xs.emplace_back(alloc_, BT * C, "act.residual");
  w.acts.clear();
  w.acts.resize(per_layer ? L : 1);
  for (auto& a : w.acts) a.allocate(alloc_, B, T, C, C / tp_, NH / tp_, options_.attention);
  {
    FT_RANGE("fwd.encoder", RangeKind::kCompute);
    ops::encoder_forward(w.xs[0].data(), inputs, param(kWte), param(kWpe), B, T, C);
  }
  for (int l = 0; l < L; ++l) {
    const float* x = w.xs[keep ? l : l % 2].data();
    float* x_out = w.xs[keep ? l + 1 : (l + 1) % 2].data();
    if (blocks_) blocks_->acquire(l, false);  // ZeRO-3: gathered for this use, then freed
    layer_forward(l, x, x_out, w.acts[per_layer ? l : 0], B, T);
    if (blocks_) blocks_->release(l);
  }
  const float* x_last = w.xs[keep ? L : L % 2].data();
  FT_RANGE("fwd.head", RangeKind::kCompute);
  w.lnf = Buffer<float>(alloc_, BT * C, "act.lnf");
  w.lnf_mean = Buffer<float>(alloc_, BT, "act.lnf_mean");
  w.lnf_rstd = Buffer<float>(alloc_, BT, "act.lnf_rstd");
  ops::layernorm_forward(w.lnf.data(), w.lnf_mean.data(), w.lnf_rstd.data(), x_last, param(kLnfw),
                         param(kLnfb), N, C);
  w.losses = Buffer<float>(alloc_, BT, "act.losses");
}

int GptModel::head_chunk_rows(int N) const {
  // Rows of logits per chunk: about kHeadChunkBytes, so that the logits of a
  // chunk stay in the last-level cache from the LM-head GEMM through the loss to
  // the two backward GEMMs, and never travel to DRAM.
  const size_t kHeadChunkBytes = std::max<size_t>(head_chunk_bytes_, 1);
  const size_t elem = options_.precision == Precision::kBf16 ? 2 : 4;
  const size_t row_bytes = static_cast<size_t>(config_.padded_vocab) * elem;
  const size_t chunks =
      (static_cast<size_t>(N) * row_bytes + kHeadChunkBytes - 1) / kHeadChunkBytes;
  return static_cast<int>((static_cast<size_t>(N) + chunks - 1) / chunks);
}

double GptModel::head_chunk(Workspace& w, const int32_t* targets, int r0, int rows,
                            float dloss_per_token, float* dlnf, bool overwrite_dwte) {
  const int C = config_.channels, V = config_.vocab_size, Vp = config_.padded_vocab;
  const float* lnf = w.lnf.data() + static_cast<size_t>(r0) * C;  // (rows, C)
  float* losses = w.losses.data() + r0;                           // (rows)
  double loss_sum;
  if (options_.precision == Precision::kBf16) {
    // bf16 logits, as PyTorch autocast: half the bytes of the step's largest tensor.
    uint16_t* logits = w.logits_bf16.data();  // (rows, Vp)
    {
      FT_RANGE("fwd.head", RangeKind::kCompute, r0);
      gemm_.forward_bf16_out(logits, lnf, lp_weight(kWte, 0), rows, C, Vp);
    }
    FT_RANGE("loss", RangeKind::kCompute, r0);
    if (!dlnf) return ops::crossentropy_forward_bf16(logits, losses, targets + r0, rows, V, Vp);
    loss_sum = ops::crossentropy_forward_backward_bf16(logits, losses, targets + r0, rows, V, Vp,
                                                       dloss_per_token);
  } else {
    float* logits = w.logits.data();  // (rows, Vp)
    {
      FT_RANGE("fwd.head", RangeKind::kCompute, r0);
      gemm_.forward(logits, lnf, param(kWte), lp_weight(kWte, 0), nullptr, rows, C, Vp,
                    options_.precision);
    }
    FT_RANGE("loss", RangeKind::kCompute, r0);
    if (!dlnf) return ops::crossentropy_forward(logits, losses, targets + r0, rows, V, Vp);
    loss_sum = ops::crossentropy_forward_backward(logits, losses, targets + r0, rows, V, Vp,
                                                  dloss_per_token);
  }
  FT_RANGE("bwd.head", RangeKind::kCompute, r0);
  float* dlnf_rows = dlnf + static_cast<size_t>(r0) * C;  // (rows, C)
  if (options_.precision == Precision::kBf16) {
    gemm_.backward_bf16_dout(dlnf_rows, lora_ ? nullptr : grad(kWte), w.logits_bf16.data(), lnf,
                             lp_weight(kWte, 0), rows, C, Vp, !overwrite_dwte);
  } else {
    gemm_.backward(dlnf_rows, lora_ ? nullptr : grad(kWte), nullptr, w.logits.data(), lnf,
                   param(kWte), lp_weight(kWte, 0), rows, C, Vp, !overwrite_dwte,
                   options_.precision);
  }
  return loss_sum;
}

void GptModel::allocate_head(Workspace& w, int rows) {
  const size_t n = static_cast<size_t>(rows) * config_.padded_vocab;
  if (options_.precision == Precision::kBf16) {
    w.logits_bf16 = Buffer<uint16_t>(alloc_, n, "act.logits_bf16");
  } else {
    w.logits = Buffer<float>(alloc_, n, "act.logits");
  }
}

double GptModel::forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                  float dloss_per_token, bool first_micro) {
  if (!whole_model()) {
    throw Error("forward_backward needs the whole model; a stage runs stage_backward");
  }
  const int C = config_.channels, L = config_.num_layers, N = B * T;
  const size_t BT = static_cast<size_t>(N);
  Workspace w;
  run_forward(inputs, B, T, w, /*keep=*/true);
  if (first_micro && lora_) {
    std::memset(lora_grads(), 0, lora_num_params() * sizeof(float));  // the adapters accumulate
  } else if (first_micro) {
    // Gradients that are only ever accumulated (+=) start from zero; the
    // matmul weight gradients are overwritten by their first GEMM instead.
    for (int i :
         {kWpe, kLn1w, kLn1b, kQkvb, kAttprojb, kLn2w, kLn2b, kFcb, kFcprojb, kLnfw, kLnfb}) {
      std::memset(grad(i), 0, layout_.sizes[i] * sizeof(float));
    }
  }
  Buffer<float> dres(alloc_, BT * C, "grad.dres");  // (B, T, C) gradient of the residual stream
  double loss_sum = 0;
  {
    // LM head, loss and LM-head backward, chunk by chunk of rows.
    Buffer<float> dlnf(alloc_, BT * C, "grad.dlnf");  // (B, T, C)
    const int rows = head_chunk_rows(N);
    allocate_head(w, rows);
    for (int r0 = 0; r0 < N; r0 += rows) {
      loss_sum += head_chunk(w, targets, r0, std::min(rows, N - r0), dloss_per_token, dlnf.data(),
                             first_micro && r0 == 0);
    }
    w.logits.reset();
    w.logits_bf16.reset();
    FT_RANGE("bwd.lnf", RangeKind::kCompute);
    std::memset(dres.data(), 0, BT * C * sizeof(float));
    ops::layernorm_backward(dres.data(), lora_ ? nullptr : grad(kLnfw),
                            lora_ ? nullptr : grad(kLnfb), dlnf.data(), w.xs[L].data(),
                            param(kLnfw), w.lnf_mean.data(), w.lnf_rstd.data(), N, C);
  }
  const bool recompute = options_.checkpointing == Checkpointing::kBlock;
  for (int l = L - 1; l >= 0; --l) {
    LayerActs& a = w.acts[recompute ? 0 : l];
    if (blocks_) blocks_->acquire(l, true);  // ZeRO-3: gathered again, with a gradient buffer
    // The last block's activations are still in the shared set from forward.
    if (recompute && l != L - 1) {
      FT_RANGE("recompute.block", RangeKind::kCompute, l);
      Buffer<float> scratch(alloc_, BT * C, "act.recompute_out");
      layer_forward(l, w.xs[l].data(), scratch.data(), a, B, T);
    }
    layer_backward(l, w.xs[l].data(), dres.data(), a, B, T, first_micro);
    if (grad_ready_) grad_ready_(l);
    if (blocks_) blocks_->release(l);
  }
  if (!lora_) {  // QLoRA: the embeddings are frozen
    FT_RANGE("bwd.encoder", RangeKind::kCompute);
    ops::encoder_backward(grad(kWte), grad(kWpe), dres.data(), inputs, B, T, C);
  }
  if (grad_ready_) grad_ready_(-1);
  return loss_sum / N;
}

double GptModel::forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T) {
  if (!whole_model()) throw Error("forward_loss needs the whole model; a stage runs stage_loss");
  Workspace w;
  run_forward(inputs, B, T, w, /*keep=*/false);
  const int N = B * T;
  const int rows = head_chunk_rows(N);
  allocate_head(w, rows);
  double sum = 0;
  for (int r0 = 0; r0 < N; r0 += rows) {
    sum += head_chunk(w, targets, r0, std::min(rows, N - r0), 0.0f, nullptr, false);
  }
  return sum / N;
}

ActivationMemory GptModel::activation_memory(int B, int T) const {
  // Per micro-batch in flight; a pipeline stage counts its own blocks and head.
  const int C = config_.channels, NH = config_.num_heads, L = local_layers();
  const size_t BT = static_cast<size_t>(B) * T;
  const size_t layer = LayerActs::bytes(B, T, C, C / tp_, NH / tp_, options_.attention);
  const size_t stream = (L + 1) * BT * C * sizeof(float);
  const size_t head = sharding_.has_head ? BT * C * sizeof(float) + 3 * BT * sizeof(float) : 0;
  ActivationMemory m;
  m.no_checkpoint_bytes = stream + L * layer + head;
  if (options_.checkpointing == Checkpointing::kBlock) {
    m.saved_bytes = stream + head;
    m.recompute_bytes = layer;
  } else {
    m.saved_bytes = m.no_checkpoint_bytes;
  }
  return m;
}

}  // namespace ft::trainer

// memory_model.cpp: ft's peak-memory prediction from the model shape, precision and recompute
// policy.
#include "ft/tuner/memory_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "ft/core/block_pool.h"
#include "ft/core/error.h"
#include "ft/trainer/gpt_config.h"
#include "ft/trainer/grad_sync.h"
#include "ft/trainer/lora_linear.h"
#include "ft/trainer/matmul.h"
#include "ft/trainer/model.h"
#include "ft/trainer/tensor_parallel.h"

namespace ft::tuner {
namespace {

constexpr size_t kRound = 512;  // the caching allocator's block rounding (AllocatorOptions)
}  // namespace

size_t allocator_block_bytes(size_t bytes) {
  return BlockPool::fresh_block_size((std::max<size_t>(bytes, 1) + kRound - 1) / kRound * kRound);
}

namespace {
size_t rounded(size_t bytes) { return allocator_block_bytes(bytes); }

// Bytes of logits per LM-head chunk and the chunk's rows, as GptModel::head_chunk_rows.
int head_rows(const trainer::TrainConfig& c, int N) {
  const size_t elem = c.options.precision == trainer::Precision::kBf16 ? 2 : 4;
  size_t chunk = static_cast<size_t>(c.head_chunk_mb) << 20;
  if (chunk == 0) {
    chunk = c.options.precision == trainer::Precision::kBf16 ? size_t{48} << 20 : size_t{1} << 30;
  }
  const size_t row_bytes = static_cast<size_t>(c.model.padded_vocab) * elem;
  const size_t chunks = (static_cast<size_t>(N) * row_bytes + chunk - 1) / chunk;
  return static_cast<int>((static_cast<size_t>(N) + chunks - 1) / chunks);
}

}  // namespace

std::vector<std::pair<std::string, size_t>> MemoryEstimate::components() const {
  return {{"params", params},
          {"grads", grads},
          {"optimizer", optimizer},
          {"low_precision_weights", low_precision_weights},
          {"nf4", nf4},
          {"adapters", adapters},
          {"comm_buffers", comm_buffers},
          {"activations", activations},
          {"head_transient", head_transient},
          {"block_transient", block_transient},
          {"batch", batch}};
}

ParallelLayout ParallelLayout::of(const trainer::ParallelConfig& p) {
  ParallelLayout l;
  l.dp = p.dp;
  l.zero_stage = p.zero;
  l.tp = p.tp;
  l.pp = p.pp;
  return l;
}

namespace {

// QLoRA's terms (whole model, one rank, fp32): the model states of frozen tensors, NF4 linears
// and adapters, the adapters' saved activations, and the block phase's scratch, as GptModel
// under QLoRA allocates them (model_lora.cpp). Returns the largest scratch one block linear
// takes (it replaces the GEMM transients: the NF4 path runs ft's sgemm directly).
size_t predict_qlora(const trainer::TrainConfig& config, MemoryEstimate& m) {
  const trainer::GptConfig& g = config.model;
  const trainer::LoraConfig& lora = config.options.lora;
  const trainer::ParamLayout pl = trainer::ParamLayout::make(g);
  const size_t L = g.num_layers, C = g.channels, r = lora.rank;
  const size_t N = static_cast<size_t>(config.micro_batch) * config.seq_len;
  size_t linears = 0, adapter = 0, saved = 0, scratch = 0;
  const struct {
    int index;
    size_t oc, ic;
  } lins[] = {{trainer::kQkvw, 3 * C, C},
              {trainer::kAttprojw, C, C},
              {trainer::kFcw, 4 * C, C},
              {trainer::kFcprojw, C, 4 * C}};
  for (const auto& li : lins) {
    linears += pl.sizes[static_cast<size_t>(li.index)];
    // Per layer: codes, absmax bytes and second-level scales, each its own allocation.
    const size_t n = li.oc * li.ic, blocks = (n + trainer::kNf4Block - 1) / trainer::kNf4Block;
    const size_t groups = (blocks + trainer::kNf4AbsmaxBlock - 1) / trainer::kNf4AbsmaxBlock;
    m.nf4 += L * (rounded((n + 1) / 2) + rounded(blocks) + rounded(4 * groups));
    const bool adapted = lora.targets(li.index);
    if (adapted) {
      adapter += L * r * (li.ic + li.oc);
      saved += L * rounded(4 * N * r);  // h = drop(x) A^T
    }
    // One linear's scratch (lora_workspace_floats: its dequantized tile, h and dh, with dropout
    // drop(x) and its gradient, in bf16 the converted operands) and the dropout keep mask.
    const bool drop = adapted && lora.dropout > 0;
    trainer::LoraShape shape;
    shape.N = static_cast<int>(N);
    shape.IC = static_cast<int>(li.ic);
    shape.OC = static_cast<int>(li.oc);
    shape.rank = adapted ? lora.rank : 0;
    shape.bf16 = config.options.precision == trainer::Precision::kBf16;
    scratch = std::max(scratch, rounded(4 * trainer::lora_workspace_floats(shape, drop)) +
                                    (drop ? rounded(N * li.ic) : 0));
  }
  m.params = rounded(4 * (pl.total - linears));
  m.grads = 0;
  // bf16: the frozen tensors' shadow (GptModel keeps one over its whole flat buffer).
  m.low_precision_weights =
      config.options.precision == trainer::Precision::kBf16 ? rounded(2 * (pl.total - linears)) : 0;
  m.adapters = 2 * rounded(4 * adapter);
  m.optimizer = 2 * rounded(4 * adapter);
  m.activations += saved;
  return scratch;
}

// One stage of one rank (the whole model when tp = pp = 1).
MemoryEstimate predict_stage(const trainer::TrainConfig& config, const ParallelLayout& layout,
                             int stage) {
  trainer::GptConfig g = config.model;
  g.validate();
  const int tp = std::max(1, layout.tp), pp = std::max(1, layout.pp);
  const int L = g.num_layers;
  const bool first = stage == 0, last = stage == pp - 1;
  const int Ls = L / pp + (stage < L % pp ? 1 : 0);  // this stage's blocks
  // Parameters this rank holds, tensor by tensor.
  const trainer::ParamLayout pl = trainer::ParamLayout::make(g);
  size_t P = 0;
  for (int i = 0; i < trainer::kNumParamTensors; ++i) {
    size_t n = pl.sizes[static_cast<size_t>(i)];
    switch (i) {
      case trainer::kWte:
        n = first || last ? n : 0;  // the tied embedding: lookup on stage 0, head on the last
        break;
      case trainer::kWpe:
        n = first ? n : 0;
        break;
      case trainer::kLnfw:
      case trainer::kLnfb:
        n = last ? n : 0;
        break;
      case trainer::kQkvw:
      case trainer::kQkvb:
      case trainer::kAttprojw:
      case trainer::kFcw:
      case trainer::kFcb:
      case trainer::kFcprojw:
        n = n / static_cast<size_t>(L) * Ls / static_cast<size_t>(tp);
        break;
      default:  // LayerNorms and the row-parallel biases: whole on every TP rank
        n = n / static_cast<size_t>(L) * Ls;
    }
    P += n;
  }
  const int B = config.micro_batch, T = config.seq_len, C = g.channels, NH = g.num_heads;
  const int Vp = g.padded_vocab;
  const size_t BT = static_cast<size_t>(B) * T, N = BT;
  const trainer::Precision prec = config.options.precision;
  const bool bf16 = prec == trainer::Precision::kBf16, fp16 = prec == trainer::Precision::kFp16;
  const size_t dp = static_cast<size_t>(std::max(1, layout.dp));
  const size_t t = static_cast<size_t>(tp);

  MemoryEstimate m;
  m.params = rounded(4 * P);
  // ZeRO-2 reduce-scatters, but ft's backward still writes every gradient into one flat buffer
  // per rank (docs/distributed.md): no gradient memory is saved.
  m.grads = rounded(4 * P);
  m.optimizer = 2 * rounded(4 * P / (layout.zero_stage >= 1 ? dp : 1));
  if (bf16) m.low_precision_weights = rounded(2 * P);
  if (fp16) m.low_precision_weights = rounded(4 * P);
  m.batch = 2 * rounded(4 * BT);

  // Activations, buffer by buffer as GptModel allocates them (each rounded by the allocator).
  const size_t act = rounded(4 * BT * C), stat = rounded(4 * BT);
  const size_t heads = static_cast<size_t>(NH) / t;
  const size_t att = config.options.attention == trainer::AttentionImpl::kFlash
                         ? rounded(4 * static_cast<size_t>(B) * heads * T)
                         : rounded(4 * static_cast<size_t>(B) * heads * T * T);
  // ln1, res2, ln2 (B,T,C); atty (B,T,C/t); qkv (B,T,3C/t); fch, fch_gelu (B,T,4C/t); 4 row
  // statistics.
  m.activations_per_layer = 3 * act + rounded(4 * BT * C / t) + rounded(12 * BT * C / t) +
                            2 * rounded(16 * BT * C / t) + 4 * stat + att;
  const bool recompute = config.options.checkpointing == trainer::Checkpointing::kBlock;
  const size_t stream = static_cast<size_t>(Ls + 1) * act;
  const size_t head_saved = last ? act + 3 * stat : 0;  // lnf, its mean and rstd, token losses
  // 1F1B: stage s holds the activations of up to pp - s micro-batches at once.
  const size_t in_flight =
      pp > 1 ? static_cast<size_t>(std::min(std::max(1, config.grad_accum), pp - stage)) : 1;
  m.activations = in_flight * (stream + head_saved) +
                  (recompute ? 1 : in_flight * static_cast<size_t>(Ls)) * m.activations_per_layer +
                  (pp > 1 ? 2 * act : 0);  // received activation and gradient

  // LM-head phase (last stage): dres and dlnf (B,T,C), the logits chunk, and the larger of the
  // head GEMMs' transients (converted operands and oneDNN scratchpad, as Gemm routes them).
  using Call = trainer::Gemm::Call;
  if (last) {
    const int rows = head_rows(config, static_cast<int>(N));
    const size_t logits = rounded(static_cast<size_t>(rows) * Vp * (bf16 ? 2 : 4));
    size_t head_gemm = 0;
    for (bool acc : {false, true}) {
      head_gemm =
          std::max({head_gemm,
                    trainer::Gemm::transient_bytes(bf16 ? Call::kForwardBf16Out : Call::kForward,
                                                   rows, C, Vp, prec, false, acc, kRound),
                    trainer::Gemm::transient_bytes(bf16 ? Call::kBackwardBf16Dout : Call::kBackward,
                                                   rows, C, Vp, prec, false, acc, kRound)});
    }
    m.head_transient = 2 * act + logits + head_gemm;
  }

  // Block phases: backward holds dres, dbt (B,T,C) and dbig (B,T,4C/t) plus the largest of its
  // four GEMMs' transients; forward (and recompute) only the GEMM transient.
  const int n = static_cast<int>(N);
  const int Ct = C / tp;
  const int shapes[4][2] = {{C, 3 * Ct}, {Ct, C}, {C, 4 * Ct}, {4 * Ct, C}};  // (IC, OC)
  size_t bwd_gemm = 0, fwd_gemm = 0;
  for (const auto& sh : shapes) {
    bwd_gemm = std::max(bwd_gemm, trainer::Gemm::transient_bytes(Call::kBackward, n, sh[0], sh[1],
                                                                 prec, true, false, kRound));
    fwd_gemm = std::max(fwd_gemm, trainer::Gemm::transient_bytes(Call::kForward, n, sh[0], sh[1],
                                                                 prec, true, false, kRound));
  }
  if (config.options.lora.enabled()) {
    if (tp > 1 || pp > 1) throw ConfigError("--qlora runs on one rank (no --tp or --pp)");
    bwd_gemm = fwd_gemm = predict_qlora(config, m);
  }
  // A block unit: this rank's share of one layer's 12 tensors; the non-block unit the rest.
  size_t block_unit = 0;
  for (int i = 0; i < trainer::kNumParamTensors; ++i) {
    if (!trainer::ParamLayout::per_block(i)) continue;
    const size_t per = pl.sizes[static_cast<size_t>(i)] / static_cast<size_t>(L);
    block_unit += trainer::tp_sharded(i) ? per / t : per;
  }
  size_t gather_fwd = 0, gather_bwd = 0;
  if (layout.zero_stage >= 3) {
    if (pp > 1) throw ConfigError("--zero 3 is not supported with --pp");
    // ZeRO-3 (trainer/zero3.cpp): the non-block tensors whole (with gradients and the bf16
    // shadow), every unit's 1/D part of parameters, gradients and AdamW; a forward block holds
    // itself and the prefetched next block, a backward block also its gradient buffer and the
    // previous block's reduce-scatter copy.
    const size_t nb = P - block_unit * static_cast<size_t>(Ls);  // the whole model: Ls = L
    const size_t part = (block_unit + dp - 1) / dp, nb_part = (nb + dp - 1) / dp;
    const size_t shard = static_cast<size_t>(L) * part + nb_part;
    m.params = rounded(4 * nb) + rounded(4 * shard);
    m.grads = rounded(4 * nb) + rounded(4 * shard);
    m.optimizer = 2 * rounded(4 * shard);
    m.low_precision_weights = bf16 ? rounded(2 * nb) : fp16 ? rounded(4 * nb) : 0;
    const size_t g = rounded(4 * part * dp), glp = bf16 ? rounded(2 * part * dp) : fp16 ? g : 0;
    gather_fwd = 2 * (g + glp);
    // Backward of block l: its parameters and gradients, block l-1 prefetched, and block l+1's
    // gradients still in their reduce-scatter, with its receive buffer.
    gather_bwd = 2 * (g + glp) + 2 * g + rounded(4 * part);
  } else if (dp > 1 || layout.zero_stage > 0) {
    // GradSync's staging buffer: its largest bucket (ShardLayout over this rank's flat layout,
    // as GradSync builds it); ZeRO-2 adds a receive buffer of the largest bucket part.
    trainer::ModelSharding sh;
    for (int s2 = 0; s2 < stage; ++s2) sh.first_layer += L / pp + (s2 < L % pp ? 1 : 0);
    sh.num_layers = Ls;
    sh.has_embedding = first;
    sh.has_head = last;
    const trainer::ShardLayout buckets = trainer::ShardLayout::make(
        trainer::tp_shard_layout(trainer::make_stage_layout(g, sh), tp), Ls, static_cast<int>(dp),
        static_cast<size_t>(config.parallel.bucket_mb * (1 << 20)));
    size_t max_part = 0;
    for (const auto& b : buckets.buckets()) max_part = std::max(max_part, b.part);
    m.comm_buffers = rounded(4 * buckets.max_bucket_elems()) +
                     (layout.zero_stage == 2 ? rounded(4 * max_part) : 0);
  }
  if (Ls > 0) {
    m.block_transient = std::max(2 * act + rounded(16 * BT * C / t) + bwd_gemm + gather_bwd,
                                 (recompute ? act : 0) + fwd_gemm + gather_fwd);
  }

  const bool head_wins = m.head_transient >= m.block_transient;
  m.phase_at_peak = head_wins ? "lm-head" : "block backward";
  if (pp > 1) m.phase_at_peak += fmt::format(" (stage {} of {})", stage, pp);
  m.peak = m.params + m.grads + m.optimizer + m.low_precision_weights + m.nf4 + m.adapters +
           m.comm_buffers + m.batch + m.activations + std::max(m.head_transient, m.block_transient);
  return m;
}

}  // namespace

MemoryEstimate predict_memory(const trainer::TrainConfig& config, const ParallelLayout& layout) {
  const int pp = std::max(1, layout.pp);
  if (layout.tp > 1 && (config.model.num_heads % layout.tp || config.model.channels % layout.tp)) {
    throw ConfigError(fmt::format("--tp {} must divide --heads {} and --channels {}", layout.tp,
                                  config.model.num_heads, config.model.channels));
  }
  if (pp > config.model.num_layers) {
    throw ConfigError(fmt::format("--pp {} stages for {} layers", pp, config.model.num_layers));
  }
  if (layout.stage >= 0) return predict_stage(config, layout, std::min(layout.stage, pp - 1));
  MemoryEstimate worst = predict_stage(config, layout, 0);
  for (int s = 1; s < pp; ++s) {
    MemoryEstimate m = predict_stage(config, layout, s);
    if (m.peak > worst.peak) worst = std::move(m);
  }
  return worst;
}

double korthikanti_activation_bytes_per_layer(int B, int T, int C, int NH, bool recompute) {
  const double s = T, b = B, h = C, a = NH;
  return recompute ? 2.0 * s * b * h : s * b * h * (34.0 + 5.0 * a * s / h);
}

}  // namespace ft::tuner

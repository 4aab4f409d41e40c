// lora_linear.cpp: QLoRA's linear layer; W's NF4 rows dequantized per tile into fp32 operands
// for ft's sgemm, or into bf16 operands for oneDNN's bf16 GEMM (fp32 accumulation).
#include "ft/trainer/lora_linear.h"

#include <fmt/format.h>

#include <algorithm>

#include "ft/core/error.h"
#include "ft/trainer/matmul.h"
#include "ft/trainer/precision.h"
#include "sgemm.h"

namespace ft::trainer {
namespace {

void check(const Nf4Tensor& w, const LoraShape& s) {
  if (s.N < 1 || s.IC < 1 || s.OC < 1 || s.rank < 0 || !(s.dropout >= 0 && s.dropout < 1)) {
    throw Error(fmt::format("lora_linear: bad shape N={} IC={} OC={} r={} dropout={}", s.N, s.IC,
                            s.OC, s.rank, s.dropout));
  }
  if (w.n != static_cast<size_t>(s.OC) * static_cast<size_t>(s.IC)) {
    throw Error(
        fmt::format("lora_linear: the NF4 weight holds {} values, not {} x {}", w.n, s.OC, s.IC));
  }
}

// drop(x) (N,IC) into out: x where kept, scaled by 1 / (1 - p); 0 where dropped.
const float* dropped(const float* x, const uint8_t* keep, const LoraShape& s, float* out) {
  if (!keep) return x;
  const float k = 1.0f / (1.0f - s.dropout);
  const size_t n = static_cast<size_t>(s.N) * static_cast<size_t>(s.IC);
  for (size_t i = 0; i < n; ++i) out[i] = keep[i] ? x[i] * k : 0.0f;
  return out;
}

// bf16 mode's extra floats: a bf16 tile of W, then either x in bf16 and one tile of output
// (forward) or dout in bf16 (backward).
size_t bf16_floats(const LoraShape& s) {
  const size_t n = static_cast<size_t>(s.N), ic = static_cast<size_t>(s.IC);
  const size_t oc = static_cast<size_t>(s.OC), t = kLoraTileRows;
  return (t * ic + 1) / 2 + std::max((n * ic + 1) / 2 + n * t, (n * oc + 1) / 2);
}

// The workspace's parts: a tile of W, drop(x) and its gradient (with a mask), h and dh scaled;
// in bf16 mode a bf16 tile, x or dout in bf16 (`in16`) and one tile of output.
struct Workspace {
  float *tile, *xd, *dxd, *hs, *dh;
  uint16_t *tile16 = nullptr, *in16 = nullptr;
  float* otile = nullptr;
  Workspace(float* ws, const LoraShape& s, bool mask) {
    const size_t nic = static_cast<size_t>(s.N) * static_cast<size_t>(s.IC);
    const size_t nr = static_cast<size_t>(s.N) * static_cast<size_t>(s.rank);
    tile = ws;
    ws += static_cast<size_t>(kLoraTileRows) * static_cast<size_t>(s.IC);
    xd = mask ? ws : nullptr;
    dxd = mask ? ws + nic : nullptr;
    ws += mask ? 2 * nic : 0;
    hs = ws;
    dh = ws + nr;
    ws += 2 * nr;
    if (s.bf16) {
      tile16 = reinterpret_cast<uint16_t*>(ws);
      ws += (static_cast<size_t>(kLoraTileRows) * static_cast<size_t>(s.IC) + 1) / 2;
      in16 = reinterpret_cast<uint16_t*>(ws);
      otile = ws + (nic + 1) / 2;  // forward only: after x's bf16 copy
    }
  }
};

Gemm& need_gemm(Gemm* gemm) {
  if (!gemm) throw Error("lora_linear: bf16 mode needs a Gemm");
  return *gemm;
}

// out (N,OC) = x W^T, a tile of W's rows (out's columns) at a time.
void base_forward(float* out, const float* x, const Nf4Tensor& w, const LoraShape& s,
                  const Workspace& ws, Gemm* gemm) {
  const size_t ic = static_cast<size_t>(s.IC), n = static_cast<size_t>(s.N);
  if (s.bf16) fp32_to_bf16(ws.in16, x, n * ic);
  for (int o0 = 0; o0 < s.OC; o0 += kLoraTileRows) {
    const int rows = std::min(kLoraTileRows, s.OC - o0);
    const size_t first = static_cast<size_t>(o0) * ic, count = static_cast<size_t>(rows) * ic;
    if (!s.bf16) {
      dequantize_nf4(w, first, count, ws.tile);
      ops::sgemm(false, true, s.N, rows, s.IC, x, s.IC, ws.tile, s.IC, 0.0f, out + o0, s.OC);
      continue;
    }
    dequantize_nf4_bf16(w, first, count, ws.tile16);
    // (N, rows) = x (N, IC) tile^T (IC, rows): the tile read transposed through its strides.
    need_gemm(gemm).bf16_gemm(ws.otile, ws.in16, s.IC, 1, ws.tile16, 1, s.IC, s.N, s.IC, rows,
                              false);
    for (size_t r = 0; r < n; ++r) {
      const float* src = ws.otile + r * static_cast<size_t>(rows);
      std::copy(src, src + rows, out + r * static_cast<size_t>(s.OC) + o0);
    }
  }
}

// dx (N,IC) = dout (N,OC) W (OC,IC), written; W dequantized a tile of its rows at a time.
void base_input_grad(float* dx, const float* dout, const Nf4Tensor& w, const LoraShape& s,
                     const Workspace& ws, Gemm* gemm) {
  const size_t ic = static_cast<size_t>(s.IC);
  if (s.bf16) fp32_to_bf16(ws.in16, dout, static_cast<size_t>(s.N) * static_cast<size_t>(s.OC));
  for (int o0 = 0; o0 < s.OC; o0 += kLoraTileRows) {
    const int rows = std::min(kLoraTileRows, s.OC - o0);
    const size_t first = static_cast<size_t>(o0) * ic, count = static_cast<size_t>(rows) * ic;
    if (!s.bf16) {
      dequantize_nf4(w, first, count, ws.tile);
      ops::sgemm(false, false, s.N, s.IC, rows, dout + o0, s.OC, ws.tile, s.IC,
                 o0 == 0 ? 0.0f : 1.0f, dx, s.IC);
      continue;
    }
    dequantize_nf4_bf16(w, first, count, ws.tile16);
    // dx (N, IC) [+]= dout[:, o0:o0+rows] (N, rows) tile (rows, IC).
    need_gemm(gemm).bf16_gemm(dx, ws.in16 + o0, s.OC, 1, ws.tile16, s.IC, 1, s.N, rows, s.IC,
                              o0 > 0);
  }
}

}  // namespace

size_t lora_workspace_floats(const LoraShape& s, bool dropout_mask) {
  const size_t nic = static_cast<size_t>(s.N) * static_cast<size_t>(s.IC);
  return static_cast<size_t>(kLoraTileRows) * static_cast<size_t>(s.IC) +
         (dropout_mask ? 2 * nic : 0) + 2 * static_cast<size_t>(s.N) * static_cast<size_t>(s.rank) +
         (s.bf16 ? bf16_floats(s) : 0);
}

void lora_linear_forward(float* out, float* h, const float* x, const Nf4Tensor& w,
                         const float* bias, const float* A, const float* B, const uint8_t* keep,
                         const LoraShape& s, float* workspace, Gemm* gemm) {
  check(w, s);
  const Workspace ws(workspace, s, keep != nullptr);
  base_forward(out, x, w, s, ws, gemm);  // x W^T   // (N, OC)
  if (bias) {
    for (int n = 0; n < s.N; ++n)
      for (int o = 0; o < s.OC; ++o) out[static_cast<size_t>(n) * s.OC + o] += bias[o];
  }
  if (s.rank == 0) return;  // a frozen NF4 linear without an adapter
  // The adapter: h = drop(x) A^T (N, r); out += scale * h B^T.
  const float* xd = dropped(x, keep, s, ws.xd);
  ops::sgemm(false, true, s.N, s.rank, s.IC, xd, s.IC, A, s.IC, 0.0f, h, s.rank);
  const size_t nr = static_cast<size_t>(s.N) * static_cast<size_t>(s.rank);
  for (size_t i = 0; i < nr; ++i) ws.hs[i] = s.scale * h[i];  // (N, r), scaled
  ops::sgemm(false, true, s.N, s.OC, s.rank, ws.hs, s.rank, B, s.rank, 1.0f, out, s.OC);
}

void lora_linear_backward(float* dx, float* dA, float* dB, const float* dout, const float* x,
                          const float* h, const Nf4Tensor& w, const float* A, const float* B,
                          const uint8_t* keep, const LoraShape& s, float* workspace, Gemm* gemm) {
  check(w, s);
  const Workspace ws(workspace, s, keep != nullptr);
  const size_t nr = static_cast<size_t>(s.N) * static_cast<size_t>(s.rank);
  if (s.rank == 0) {  // no adapter: dx = dout W only
    if (dx) base_input_grad(dx, dout, w, s, ws, gemm);
    return;
  }
  // dh = scale * dout B   // (N, r)
  ops::sgemm(false, false, s.N, s.rank, s.OC, dout, s.OC, B, s.rank, 0.0f, ws.dh, s.rank);
  for (size_t i = 0; i < nr; ++i) ws.dh[i] *= s.scale;
  // dB += scale * dout^T h   // (OC, r)
  for (size_t i = 0; i < nr; ++i) ws.hs[i] = s.scale * h[i];
  ops::sgemm(true, false, s.OC, s.rank, s.N, dout, s.OC, ws.hs, s.rank, 1.0f, dB, s.rank);
  // dA += dh^T drop(x)   // (r, IC)
  const float* xd = dropped(x, keep, s, ws.xd);
  ops::sgemm(true, false, s.rank, s.IC, s.N, ws.dh, s.rank, xd, s.IC, 1.0f, dA, s.IC);
  if (!dx) return;
  // dx = dout W + mask(dh A).   // (N, IC)
  base_input_grad(dx, dout, w, s, ws, gemm);
  if (!keep) {
    ops::sgemm(false, false, s.N, s.IC, s.rank, ws.dh, s.rank, A, s.IC, 1.0f, dx, s.IC);
    return;
  }
  ops::sgemm(false, false, s.N, s.IC, s.rank, ws.dh, s.rank, A, s.IC, 0.0f, ws.dxd, s.IC);
  const float k = 1.0f / (1.0f - s.dropout);
  const size_t nic = static_cast<size_t>(s.N) * static_cast<size_t>(s.IC);
  for (size_t i = 0; i < nic; ++i)
    if (keep[i]) dx[i] += ws.dxd[i] * k;
}

}  // namespace ft::trainer

// Element-wise and row-wise layer operations: RMSNorm, RoPE, SwiGLU, add.
// All but RoPE (libm-bound) run the active ISA's kernel (kernels/cpu/ops_inl.h).
#pragma once

#include <cstdint>

namespace pagoda::kernels {

// y = x / rms(x) * weight over rows of n (y may alias x).
void rms_norm(const float* x, const float* weight, float* y, int64_t n, float eps);

// Mamba-2's recurrence, one token of one head: for each row p < rows of the
// state s ([rows][n]): s[p] = decay * s[p] + (x[p] * dt) * b; then
// y[p] = s[p] . c + d * x[p].
void ssm_step(float* s, int64_t rows, int64_t n, const float* x, const float* b, const float* c, float dt, float decay,
              float d, float* y);

// The gated delta rule (Gated DeltaNet), one token of one head, state s
// [dk][dv]: s = g s; delta = beta (v - s^T k); s += k delta^T;
// o = (s^T q) * scale. tmp holds dv floats of scratch.
void deltanet_step(float* s, int64_t dk, int64_t dv, const float* q, const float* k, const float* v, float g,
                   float beta, float scale, float* o, float* tmp);

enum class RopeStyle {
  kInterleaved,  // GGML "norm": rotates pairs (x[2i], x[2i+1]) — llama
  kHalfSplit,    // GGML "neox": rotates pairs (x[i], x[i + d/2]) — qwen2
};

struct RopeParams {
  RopeStyle style = RopeStyle::kInterleaved;
  int32_t rot_dim = 0;  // rotated dims per head (<= head_dim)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;              // linear scaling: position * freq_scale
  const float* freq_factors = nullptr;  // optional, rot_dim/2 divisors (llama3)
  // YaRN (ext_factor > 0, see set_yarn): pair i turns by a blend of the
  // interpolated angle (freq_scale) and the extrapolated one (unscaled),
  // weight ext_factor * ramp(i), ramp 1 up to pair yarn_low falling to 0 at
  // yarn_high; cos and sin are multiplied by mscale.
  float ext_factor = 0;
  float yarn_low = 0, yarn_high = 0;
  float mscale = 1.0f;
};

// Sets p's YaRN fields as ggml does (rope_yarn_corr_dims): correction dims
// from the original context length and the beta_fast / beta_slow rotation
// counts, and mscale = attn_factor * (1 + 0.1 ln(1 / freq_scale)) when the
// context is stretched; ext_factor 0 sets only mscale = attn_factor.
// p.rot_dim, freq_base and freq_scale must be set.
void set_yarn(RopeParams& p, int32_t n_ctx_orig, float ext_factor, float beta_fast, float beta_slow, float attn_factor);

// Rotates n_heads heads of head_dim at `x` (contiguous) for position pos.
void rope(float* x, int32_t n_heads, int32_t head_dim, int32_t pos, const RopeParams& p);

// The two halves of rope(), for callers that rotate several tensors (Q and K,
// every layer) at one position: rope_angles writes cs[2i] = cos, cs[2i + 1] =
// sin of pair i (rot_dim floats, mscale applied) — the libm part, once per
// token and step; rope_apply rotates with them. rope() is exactly the two.
void rope_angles(int32_t pos, const RopeParams& p, float* cs);
// rope_angles for positions[0..n): cs[t * rot_dim ...] per token, the
// per-pair frequencies (one pow each) computed once per call; the same bits
// as n calls of rope_angles.
void rope_angles(const int32_t* positions, int64_t n, const RopeParams& p, float* cs);
void rope_apply(float* x, int32_t n_heads, int32_t head_dim, const float* cs, const RopeParams& p);

// LayerNorm: y = (x - mean) / sqrt(var + eps) * weight + bias (weight,
// bias: null for none); y may alias x. Portable code (RWKV-7's norms).
void layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t n, float eps);

// out[i] = silu(gate[i]) * up[i]
void swiglu(const float* gate, const float* up, float* out, int64_t n);

// out[i] = gelu_tanh(gate[i]) * up[i] (GeGLU; the tanh approximation, as
// Gemma and llama.cpp use). Portable code for now (no per-ISA variant).
void geglu(const float* gate, const float* up, float* out, int64_t n);

// gpt-oss's clamped SwiGLU: g = min(gate, 7), u = clamp(up, -7, 7),
// out = g * sigmoid(1.702 g) * (u + 1). Portable code.
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n);

// a[i] += b[i]
void add_inplace(float* a, const float* b, int64_t n);

}  // namespace pagoda::kernels

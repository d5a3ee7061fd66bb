// Element-wise and row-wise layer operations: RMSNorm, RoPE, SwiGLU, add.
// All but RoPE (libm-bound) run the active ISA's kernel (kernels/cpu/ops_inl.h).
#pragma once

#include <cstdint>

namespace pagoda::kernels {

// y = x / rms(x) * weight over rows of n (y may alias x).
void rms_norm(const float* x, const float* weight, float* y, int64_t n, float eps);

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
};

// Rotates n_heads heads of head_dim at `x` (contiguous) for position pos.
void rope(float* x, int32_t n_heads, int32_t head_dim, int32_t pos, const RopeParams& p);

// out[i] = silu(gate[i]) * up[i]
void swiglu(const float* gate, const float* up, float* out, int64_t n);

// out[i] = gelu_tanh(gate[i]) * up[i] (GeGLU; the tanh approximation, as
// Gemma and llama.cpp use). Portable code for now (no per-ISA variant).
void geglu(const float* gate, const float* up, float* out, int64_t n);

// a[i] += b[i]
void add_inplace(float* a, const float* b, int64_t n);

}  // namespace pagoda::kernels

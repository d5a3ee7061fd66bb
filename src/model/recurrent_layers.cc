// Recurrent (linear-attention / state-space) mixers: qwen35's Gated DeltaNet
// and Mamba-2, as llama.cpp computes them. Each slice runs the step form of
// its recurrence (kernels::ssm_step / deltanet_step, SIMD per ISA) token by
// token from the state its slot holds (the state
// after kv_len - num_tokens tokens), so a prompt fed whole, in chunks or one
// token at a time gives the same result; the projections around the
// recurrence are batched matmuls over the whole flat batch.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/ops.h"
#include "model/llama_model.h"

namespace pagoda {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float silu(float x) { return x * sigmoid(x); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// One token of a depthwise causal conv over `channels`: out[c] = sum_j
// w[c][j] * in[t - (k - 1) + j][c], with window rows holding the k - 1
// previous inputs (oldest first); then the window moves on by `in`.
void conv_step(float* window, const float* w, int32_t k, int32_t channels, const float* in, float* out) {
  for (int32_t c = 0; c < channels; ++c) {
    const float* wc = w + static_cast<int64_t>(c) * k;
    float acc = wc[k - 1] * in[c];
    for (int32_t j = 0; j < k - 1; ++j) acc += wc[j] * window[static_cast<int64_t>(j) * channels + c];
    out[c] = acc;
  }
  if (k > 1) {
    std::copy(window + channels, window + static_cast<int64_t>(k - 1) * channels, window);
    std::copy_n(in, channels, window + static_cast<int64_t>(k - 2) * channels);
  }
}

// x / max(||x||_2, eps)
void l2_normalize(float* x, int32_t n, float eps) {
  double ss = 0;
  for (int32_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = 1.0f / std::max(static_cast<float>(std::sqrt(ss)), eps);
  for (int32_t i = 0; i < n; ++i) x[i] *= inv;
}

// fn(ti, nt) over a step's (sequence, head) recurrences: on the pool, or on
// the calling thread when they are under 64K multiply-adds (waking the pool
// would cost more).
template <class Fn>
void run_recurrences(ThreadPool& pool, int64_t macs, const Fn& fn) {
  if (macs < 64 * 1024) {
    fn(0, 1);
  } else {
    pool.run(fn);
  }
}

}  // namespace

float* LlamaModel::layer_state(const SeqSlice& s, StateStorage& state, int32_t il) const {
  PAGODA_CHECK(s.state_slot >= 0);
  const int64_t size = config_.recurrent_state_floats(il);
  return state.slot(s.state_slot) + (state_offset_[static_cast<size_t>(il)] - size);
}

float* LlamaModel::start_layer_state(const SeqSlice& s, StateStorage& state, int32_t il) const {
  float* p = layer_state(s, state, il);
  if (s.kv_len == s.num_tokens) std::fill_n(p, config_.recurrent_state_floats(il), 0.0f);  // a new sequence
  return p;
}

void LlamaModel::deltanet_layer(const ForwardBatch& batch, StateStorage& state, ThreadPool& pool, int32_t il) {
  const auto& c = config_;
  const Layer& l = layers_[il];
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  const int32_t hs = c.hidden_size, kc = c.ssm_conv_kernel, ch = c.ssm_conv_channels();
  const int32_t nk = c.ssm_group_count, dk = c.ssm_state_size, nv = c.ssm_time_step_rank;
  const int32_t inner = c.ssm_inner_size, dv = inner / nv;
  for (int64_t t = 0; t < n; ++t) kernels::rms_norm(&ws_.x[t * hs], l.attn_norm, &ws_.h[t * hs], hs, c.rms_eps);
  ws_.mix.resize(static_cast<size_t>(n) * ch);
  ws_.mix_z.resize(static_cast<size_t>(n) * inner);
  ws_.mix_beta.resize(static_cast<size_t>(n) * nv);
  ws_.mix_alpha.resize(static_cast<size_t>(n) * nv);
  ws_.mix_out.resize(static_cast<size_t>(n) * inner);
  {
    const kernels::WeightView* w[] = {&l.attn_qkv, &l.attn_gate, &l.ssm_beta, &l.ssm_alpha};
    float* y[] = {ws_.mix.data(), ws_.mix_z.data(), ws_.mix_beta.data(), ws_.mix_alpha.data()};
    const int64_t stride[] = {ch, inner, nv, nv};
    kernels::matmul_fused(w, 4, ws_.h.data(), hs, n, y, stride, pool);
  }
  // Conv (sequential per slice: its window), silu, q/k L2 norms, the gates.
  std::vector<float> conv_out(static_cast<size_t>(ch));
  for (const SeqSlice& s : batch.seqs) {
    float* window = start_layer_state(s, state, il);
    for (int64_t t = s.token_begin; t < s.token_begin + s.num_tokens; ++t) {
      float* u = &ws_.mix[t * ch];
      conv_step(window, l.ssm_conv, kc, ch, u, conv_out.data());
      for (int32_t i = 0; i < ch; ++i) u[i] = silu(conv_out[i]);
      for (int32_t h = 0; h < 2 * nk; ++h) l2_normalize(u + h * dk, dk, c.rms_eps);  // q heads, then k heads
      for (int32_t h = 0; h < nv; ++h) {
        float& beta = ws_.mix_beta[t * nv + h];
        float& g = ws_.mix_alpha[t * nv + h];
        beta = sigmoid(beta);
        g = std::exp(softplus(g + l.ssm_dt_bias[h]) * l.ssm_a[h]);  // the state's decay this token
      }
    }
  }
  // The delta rule per (slice, v head) (kernels::deltanet_step): S = g S;
  // S += k (beta (v - S^T k))^T; o = S^T q / sqrt(dk). S is [dk][dv]; v head
  // h reads q/k head h % nk.
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  const int64_t num_items = static_cast<int64_t>(batch.seqs.size()) * nv;
  auto run = [&](int ti, int nt) {
    std::vector<float> ks(static_cast<size_t>(dv));
    for (int64_t item = ti; item < num_items; item += nt) {
      const SeqSlice& s = batch.seqs[static_cast<size_t>(item / nv)];
      const auto h = static_cast<int32_t>(item % nv);
      float* S = layer_state(s, state, il) + int64_t{kc - 1} * ch + int64_t{h} * dk * dv;
      for (int64_t t = s.token_begin; t < s.token_begin + s.num_tokens; ++t) {
        const float* u = &ws_.mix[t * ch];
        const float* q = u + (h % nk) * dk;
        const float* k = u + (nk + h % nk) * dk;
        const float* v = u + 2 * nk * dk + h * dv;
        const float g = ws_.mix_alpha[t * nv + h], beta = ws_.mix_beta[t * nv + h];
        float* o = &ws_.mix_out[t * inner + int64_t{h} * dv];
        kernels::deltanet_step(S, dk, dv, q, k, v, g, beta, scale, o, ks.data());
        kernels::rms_norm(o, l.ssm_norm, o, dv, c.rms_eps);
        const float* z = &ws_.mix_z[t * inner + int64_t{h} * dv];
        for (int32_t j = 0; j < dv; ++j) o[j] *= silu(z[j]);
      }
    }
  };
  run_recurrences(pool, n * int64_t{nv} * dk * dv * 3, run);
  kernels::matmul(l.ssm_out, ws_.mix_out.data(), inner, n, ws_.h.data(), hs, pool);
  kernels::add_inplace(ws_.x.data(), ws_.h.data(), n * hs);
}

void LlamaModel::mamba2_layer(const ForwardBatch& batch, StateStorage& state, ThreadPool& pool, int32_t il) {
  const auto& c = config_;
  const Layer& l = layers_[il];
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  const int32_t hs = c.hidden_size, kc = c.ssm_conv_kernel, ch = c.ssm_conv_channels();
  const int32_t ng = c.ssm_group_count, ds = c.ssm_state_size, nh = c.ssm_time_step_rank;
  const int32_t inner = c.ssm_inner_size, hd = inner / nh, width = inner + ch + nh;
  for (int64_t t = 0; t < n; ++t) kernels::rms_norm(&ws_.x[t * hs], l.attn_norm, &ws_.h[t * hs], hs, c.rms_eps);
  ws_.mix.resize(static_cast<size_t>(n) * width);
  ws_.mix_out.resize(static_cast<size_t>(n) * inner);
  kernels::matmul(l.ssm_in, ws_.h.data(), hs, n, ws_.mix.data(), width, pool);  // [z, xBC, dt] per token
  std::vector<float> conv_out(static_cast<size_t>(ch));
  for (const SeqSlice& s : batch.seqs) {
    float* window = start_layer_state(s, state, il);
    for (int64_t t = s.token_begin; t < s.token_begin + s.num_tokens; ++t) {
      float* xbc = &ws_.mix[t * width + inner];
      conv_step(window, l.ssm_conv, kc, ch, xbc, conv_out.data());
      for (int32_t i = 0; i < ch; ++i) xbc[i] = silu(conv_out[i] + l.ssm_conv_bias[i]);
      float* dt = xbc + ch;
      for (int32_t h = 0; h < nh; ++h) dt[h] = softplus(dt[h] + l.ssm_dt_bias[h]);
    }
  }
  // Per (slice, head): S = exp(dt A) S + dt x B^T; y = S C + D x
  // (kernels::ssm_step). S is [hd][ds]; head h reads B/C group h / (nh / ng).
  const int64_t num_items = static_cast<int64_t>(batch.seqs.size()) * nh;
  auto run = [&](int ti, int nt) {
    for (int64_t item = ti; item < num_items; item += nt) {
      const SeqSlice& s = batch.seqs[static_cast<size_t>(item / nh)];
      const auto h = static_cast<int32_t>(item % nh);
      const int32_t gi = h / (nh / ng);
      float* S = layer_state(s, state, il) + int64_t{kc - 1} * ch + int64_t{h} * hd * ds;
      for (int64_t t = s.token_begin; t < s.token_begin + s.num_tokens; ++t) {
        const float* row = &ws_.mix[t * width];
        const float* x = row + inner + int64_t{h} * hd;
        const float* B = row + inner + inner + int64_t{gi} * ds;
        const float* C = row + inner + inner + int64_t{ng} * ds + int64_t{gi} * ds;
        const float dt = row[inner + ch + h];
        kernels::ssm_step(S, hd, ds, x, B, C, dt, std::exp(dt * l.ssm_a[h]), l.ssm_d[h],
                          &ws_.mix_out[t * inner + int64_t{h} * hd]);
      }
    }
  };
  run_recurrences(pool, n * int64_t{inner} * ds * 2, run);
  // y * silu(z), RMSNorm per group of inner / ng channels.
  const int32_t gw = inner / ng;
  for (int64_t t = 0; t < n; ++t) {
    float* y = &ws_.mix_out[t * inner];
    const float* z = &ws_.mix[t * width];
    for (int32_t i = 0; i < inner; ++i) y[i] *= silu(z[i]);
    for (int32_t g = 0; g < ng; ++g) kernels::rms_norm(y + g * gw, l.ssm_norm + g * gw, y + g * gw, gw, c.rms_eps);
  }
  kernels::matmul(l.ssm_out, ws_.mix_out.data(), inner, n, ws_.h.data(), hs, pool);
  kernels::add_inplace(ws_.x.data(), ws_.h.data(), n * hs);
}

}  // namespace pagoda

namespace pagoda {

void LlamaModel::rwkv7_layer(const ForwardBatch& batch, StateStorage& state, ThreadPool& pool, int32_t il) {
  const auto& c = config_;
  const Layer::Rwkv7& w = layers_[il].rwkv;
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  const int32_t C = c.hidden_size, hsz = c.rwkv_head_size, nh = C / hsz;
  const auto sz = static_cast<size_t>(n) * C;
  // Time mix. xa = LN(x); each token mixes with the previous token's xa
  // (the slice's first with the state's), six ways: [r w k v a g].
  for (int64_t t = 0; t < n; ++t)
    kernels::layer_norm(&ws_.x[t * C], layers_[il].attn_norm, w.attn_norm_b, &ws_.h[t * C], C, c.rms_eps);
  ws_.mix.resize(sz * 6);
  for (const SeqSlice& s : batch.seqs) {
    float* st = start_layer_state(s, state, il);
    for (int64_t t = s.token_begin; t < s.token_begin + s.num_tokens; ++t) {
      const float* xa = &ws_.h[t * C];
      const float* prev = t == s.token_begin ? st : &ws_.h[(t - 1) * C];
      for (int32_t m = 0; m < 6; ++m) {
        float* out = &ws_.mix[(t * 6 + m) * C];
        const float* lerp = w.lerp + int64_t{m} * C;
        for (int32_t i = 0; i < C; ++i) out[i] = xa[i] + (prev[i] - xa[i]) * lerp[i];
      }
    }
    std::copy_n(&ws_.h[(s.token_begin + s.num_tokens - 1) * C], C, st);  // the next slice's previous token
  }
  auto mixed = [&](int32_t m) { return ws_.mix.data() + int64_t{m} * C; };  // rows of stride 6C
  for (auto* v : {&ws_.rw_r, &ws_.rw_w, &ws_.rw_k, &ws_.rw_v, &ws_.rw_a, &ws_.rw_g}) v->resize(sz);
  kernels::matmul(w.receptance, mixed(0), 6 * C, n, ws_.rw_r.data(), C, pool);
  kernels::matmul(w.key, mixed(2), 6 * C, n, ws_.rw_k.data(), C, pool);
  kernels::matmul(w.value, mixed(3), 6 * C, n, ws_.rw_v.data(), C, pool);
  // out = x2(act(x1(in))) for a LoRA pair, act applied elementwise.
  auto lora = [&](const kernels::WeightView& x1, const kernels::WeightView& x2, const float* in, float (*act)(float),
                  float* out) {
    const int64_t rank = x1.n_out;
    ws_.rw_lora.resize(static_cast<size_t>(n * rank));
    kernels::matmul(x1, in, 6 * C, n, ws_.rw_lora.data(), rank, pool);
    if (act)
      for (float& v : ws_.rw_lora) v = act(v);
    kernels::matmul(x2, ws_.rw_lora.data(), rank, n, out, C, pool);
  };
  lora(
      w.w1, w.w2, mixed(1), [](float v) { return std::tanh(v); }, ws_.rw_w.data());
  lora(w.a1, w.a2, mixed(4), nullptr, ws_.rw_a.data());
  lora(w.g1, w.g2, mixed(5), sigmoid, ws_.rw_g.data());
  if (il == 0) {
    ws_.v_first.assign(ws_.rw_v.begin(), ws_.rw_v.begin() + static_cast<int64_t>(sz));
  } else {  // value residual: v += (v_first - v) * sigmoid(v0 + v2(v1(x_v)))
    std::vector<float>& mix = ws_.mix_out;
    mix.resize(sz);
    lora(w.v1, w.v2, mixed(3), nullptr, mix.data());
    for (int64_t t = 0; t < n; ++t)
      for (int32_t i = 0; i < C; ++i) {
        float& v = ws_.rw_v[t * C + i];
        v += (ws_.v_first[t * C + i] - v) * sigmoid(w.v0[i] + mix[t * C + i]);
      }
  }
  // Per token: decay w, learning rate a, kk = normalized k * k_k per head,
  // k scaled by the rate; rw_a then holds kk * a (the state's "b").
  ws_.mix_z.resize(sz);  // kk
  for (int64_t t = 0; t < n; ++t) {
    float* wt = &ws_.rw_w[t * C];
    float* at = &ws_.rw_a[t * C];
    float* kt = &ws_.rw_k[t * C];
    float* kk = &ws_.mix_z[t * C];
    for (int32_t i = 0; i < C; ++i) {
      wt[i] = std::exp(-0.606531f * sigmoid(w.w0[i] + wt[i]));
      at[i] = sigmoid(w.a0[i] + at[i]);
      kk[i] = kt[i] * w.k_k[i];
    }
    for (int32_t h = 0; h < nh; ++h) l2_normalize(kk + h * hsz, hsz, 1e-12f);
    for (int32_t i = 0; i < C; ++i) {
      kt[i] += kt[i] * w.k_a[i] * (at[i] - 1.0f);
      at[i] *= kk[i];
    }
  }
  // wkv7 per (slice, head): S[i][j] (i value, j key): sa = S (-kk);
  // S = S diag(w) + v k^T + sa (kk a)^T; o = S r.
  ws_.mix_out.resize(sz);
  const int64_t num_items = static_cast<int64_t>(batch.seqs.size()) * nh;
  auto run = [&](int ti, int nt) {
    for (int64_t item = ti; item < num_items; item += nt) {
      const SeqSlice& s = batch.seqs[static_cast<size_t>(item / nh)];
      const auto h = static_cast<int32_t>(item % nh);
      float* S = layer_state(s, state, il) + 2 * int64_t{C} + int64_t{h} * hsz * hsz;
      for (int64_t t = s.token_begin; t < s.token_begin + s.num_tokens; ++t) {
        const int64_t off = t * C + int64_t{h} * hsz;
        const float *r = &ws_.rw_r[off], *wd = &ws_.rw_w[off], *k = &ws_.rw_k[off], *v = &ws_.rw_v[off];
        const float *kk = &ws_.mix_z[off], *b = &ws_.rw_a[off];
        float* o = &ws_.mix_out[off];
        for (int32_t i = 0; i < hsz; ++i) {
          float* row = S + int64_t{i} * hsz;
          float sa = 0;
          for (int32_t j = 0; j < hsz; ++j) sa -= kk[j] * row[j];
          float acc = 0;
          for (int32_t j = 0; j < hsz; ++j) {
            row[j] = row[j] * wd[j] + v[i] * k[j] + sa * b[j];
            acc += row[j] * r[j];
          }
          o[i] = acc;
        }
      }
    }
  };
  run_recurrences(pool, n * int64_t{C} * hsz * 3, run);
  // GroupNorm per head, the bonus v * sum(k r r_k) per head, the gate.
  for (int64_t t = 0; t < n; ++t) {
    float* o = &ws_.mix_out[t * C];
    for (int32_t h = 0; h < nh; ++h) {
      const int64_t hb = int64_t{h} * hsz;
      kernels::layer_norm(o + hb, w.ln + hb, w.ln_b + hb, o + hb, hsz, 64e-5f);
      float bonus = 0;
      for (int32_t i = 0; i < hsz; ++i) bonus += ws_.rw_k[t * C + hb + i] * ws_.rw_r[t * C + hb + i] * w.r_k[hb + i];
      for (int32_t i = 0; i < hsz; ++i) o[hb + i] += ws_.rw_v[t * C + hb + i] * bonus;
    }
    for (int32_t i = 0; i < C; ++i) o[i] *= ws_.rw_g[t * C + i];
  }
  kernels::matmul(w.output, ws_.mix_out.data(), C, n, ws_.h.data(), C, pool);
  kernels::add_inplace(ws_.x.data(), ws_.h.data(), n * C);

  // Channel mix: xf = LN(x), mixed with the previous token's xf by
  // lerp_k; x += value(relu(key(.))^2).
  for (int64_t t = 0; t < n; ++t)
    kernels::layer_norm(&ws_.x[t * C], w.ffn_norm, w.ffn_norm_b, &ws_.h[t * C], C, c.rms_eps);
  ws_.mix.resize(sz);
  for (const SeqSlice& s : batch.seqs) {
    float* prev_state = layer_state(s, state, il) + C;
    for (int64_t t = s.token_begin; t < s.token_begin + s.num_tokens; ++t) {
      const float* xf = &ws_.h[t * C];
      const float* prev = t == s.token_begin ? prev_state : &ws_.h[(t - 1) * C];
      for (int32_t i = 0; i < C; ++i) ws_.mix[t * C + i] = xf[i] + (prev[i] - xf[i]) * w.cm_lerp_k[i];
    }
    std::copy_n(&ws_.h[(s.token_begin + s.num_tokens - 1) * C], C, prev_state);
  }
  const int32_t F = c.ffn_size;
  float* kf = ws_.gate.data();  // ensure_workspace sized it for n x ffn_size
  kernels::matmul(w.cm_key, ws_.mix.data(), C, n, kf, F, pool);
  for (int64_t i = 0; i < n * F; ++i) kf[i] = kf[i] > 0 ? kf[i] * kf[i] : 0.0f;
  kernels::matmul(w.cm_value, kf, F, n, ws_.h.data(), C, pool);
  kernels::add_inplace(ws_.x.data(), ws_.h.data(), n * C);
}

}  // namespace pagoda

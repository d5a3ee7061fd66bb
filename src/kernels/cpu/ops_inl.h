// The element-wise and row-wise layer ops and the activation quantizers,
// written once over the vector vocabulary V (cpu/simd_scalar.h);
// cpu/ops_<isa>.cc binds V, textually includes this file inside its
// anonymous namespace and registers them with register_ops().
//
// The quantizers give the same bits on every ISA (max |x|, one multiply,
// clamp, round to nearest even, integer sums), so every matmul path sees
// identical activations (tests/kernels/ops_isa_test.cc checks it).

using VF = V::F;
constexpr int64_t kW = V::kLanes;

// The first n elements (0 <= n <= kW) of x, zeros after; stores likewise.
inline VF load_n(const float* x, int64_t n) { return n == kW ? V::load_f(x) : V::load_f_part(x, static_cast<int>(n)); }
inline void store_n(float* y, VF v, int64_t n) {
  if (n == kW) {
    V::store_f(y, v);
  } else {
    V::store_f_part(y, v, static_cast<int>(n));
  }
}

float dot_f32_kernel(const float* a, const float* b, int64_t n) {
  constexpr int kAcc = V::kAccF;
  VF acc[kAcc];
  for (auto& v : acc) v = V::zero_f();
  int64_t i = 0;
  for (; i + kAcc * kW <= n; i += kAcc * kW)
    for (int u = 0; u < kAcc; ++u) acc[u] = V::fmadd(V::load_f(a + i + u * kW), V::load_f(b + i + u * kW), acc[u]);
  for (; i < n; i += kW) {
    const int64_t m = std::min(kW, n - i);
    acc[0] = V::fmadd(load_n(a + i, m), load_n(b + i, m), acc[0]);
  }
  for (int u = 1; u < kAcc; ++u) acc[0] = V::add(acc[0], acc[u]);
  return V::hsum(acc[0]);
}

// y = x / rms(x) * weight (y may alias x). The sum of squares in float,
// kAccF x 16 partial sums.
void rms_norm_kernel(const float* x, const float* weight, float* y, int64_t n, float eps) {
  constexpr int kAcc = V::kAccF;
  VF acc[kAcc];
  for (auto& v : acc) v = V::zero_f();
  int64_t i = 0;
  for (; i + kAcc * kW <= n; i += kAcc * kW)
    for (int u = 0; u < kAcc; ++u) {
      const VF v = V::load_f(x + i + u * kW);
      acc[u] = V::fmadd(v, v, acc[u]);
    }
  for (; i < n; i += kW) {
    const VF v = load_n(x + i, std::min(kW, n - i));
    acc[0] = V::fmadd(v, v, acc[0]);
  }
  for (int u = 1; u < kAcc; ++u) acc[0] = V::add(acc[0], acc[u]);
  const float inv = 1.0f / std::sqrt(V::hsum(acc[0]) / static_cast<float>(n) + eps);
  const VF vinv = V::set1_f(inv);
  for (i = 0; i < n; i += kW) {
    const int64_t m = std::min(kW, n - i);
    store_n(y + i, V::mul(V::mul(load_n(x + i, m), vinv), load_n(weight + i, m)), m);
  }
}

// out = silu(gate) * up = gate / (1 + exp(-gate)) * up.
void swiglu_kernel(const float* gate, const float* up, float* out, int64_t n) {
  const VF one = V::set1_f(1.0f);
  for (int64_t i = 0; i < n; i += kW) {
    const int64_t m = std::min(kW, n - i);
    const VF g = load_n(gate + i, m);
    const VF e = V::exp(V::sub(V::zero_f(), g));
    store_n(out + i, V::mul(V::div(g, V::add(one, e)), load_n(up + i, m)), m);
  }
}

void add_kernel(float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; i += kW) {
    const int64_t m = std::min(kW, n - i);
    store_n(a + i, V::add(load_n(a + i, m), load_n(b + i, m)), m);
  }
}

// One block of kBlock floats to int8 with d = max|x| / 127; sums16[k] = sum
// of q over elements 16k..16k+15. Returns d.
template <int kBlock>
float quantize_block(const float* x, int8_t* q, int32_t* sums16) {
  VF m = V::zero_f();
  for (int i = 0; i < kBlock; i += kW) m = V::max(m, V::abs(V::load_f(x + i)));
  const float amax = V::hmax(m);
  const float d = amax / 127.0f;
  const VF id = V::set1_f(d > 0 ? 127.0f / amax : 0.0f);
  const VF lo = V::set1_f(-127.0f), hi = V::set1_f(127.0f);
  for (int i = 0; i < kBlock; i += kW) {
    const auto qi = V::round_f_i(V::min(hi, V::max(lo, V::mul(V::load_f(x + i), id))));
    V::store_i8(q + i, qi);
    sums16[i / kW] = V::hsum_i32(qi);
  }
  return d;
}

void quantize_q8_32_kernel(const float* x, int64_t n, int8_t* qs, float* d, float* s, int32_t* qsum) {
  static_assert(kActBlock32 == 2 * kW && kActSumGroup == kW);
  for (int64_t b = 0; b < n / kActBlock32; ++b) {
    int32_t sums[2];
    d[b] = quantize_block<kActBlock32>(x + b * kActBlock32, qs + b * kActBlock32, sums);
    qsum[b] = sums[0] + sums[1];
    s[b] = d[b] * static_cast<float>(qsum[b]);
  }
}

void quantize_q8_k_kernel(const float* x, int64_t n, int8_t* qs, float* d, int16_t* bsums) {
  constexpr int kGroups = kActBlockK / kActSumGroup;
  for (int64_t b = 0; b < n / kActBlockK; ++b) {
    int32_t sums[kGroups];
    d[b] = quantize_block<kActBlockK>(x + b * kActBlockK, qs + b * kActBlockK, sums);
    for (int g = 0; g < kGroups; ++g) bsums[b * kGroups + g] = static_cast<int16_t>(sums[g]);
  }
}

void quantize_q8_row_kernel(const float* x, int64_t n, int8_t* qs, float* d, int32_t* qsum) {
  VF m = V::zero_f();
  for (int64_t i = 0; i < n; i += kW) m = V::max(m, V::abs(V::load_f(x + i)));
  const float amax = V::hmax(m);
  const VF id = V::set1_f(amax > 0 ? 127.0f / amax : 0.0f);
  const VF lo = V::set1_f(-127.0f), hi = V::set1_f(127.0f);
  int32_t sum = 0;
  for (int64_t i = 0; i < n; i += kW) {
    const auto qi = V::round_f_i(V::min(hi, V::max(lo, V::mul(V::load_f(x + i), id))));
    V::store_i8(qs + i, qi);
    sum += V::hsum_i32(qi);
  }
  *d = amax / 127.0f;
  *qsum = sum;
}

// Mamba-2's step for one head (kernels/ops.h ssm_step).
void ssm_step_kernel(float* s, int64_t rows, int64_t n, const float* x, const float* b, const float* c, float dt,
                     float decay, float d, float* y) {
  const VF vdecay = V::set1_f(decay);
  for (int64_t p = 0; p < rows; ++p) {
    float* sp = s + p * n;
    const VF xdt = V::set1_f(x[p] * dt);
    VF acc0 = V::zero_f(), acc1 = V::zero_f();
    int64_t j = 0;
    for (; j + 2 * kW <= n; j += 2 * kW) {
      const VF v0 = V::fmadd(xdt, V::load_f(b + j), V::mul(V::load_f(sp + j), vdecay));
      const VF v1 = V::fmadd(xdt, V::load_f(b + j + kW), V::mul(V::load_f(sp + j + kW), vdecay));
      V::store_f(sp + j, v0);
      V::store_f(sp + j + kW, v1);
      acc0 = V::fmadd(v0, V::load_f(c + j), acc0);
      acc1 = V::fmadd(v1, V::load_f(c + j + kW), acc1);
    }
    for (; j < n; j += kW) {
      const int64_t m = std::min(kW, n - j);
      const VF v = V::fmadd(xdt, load_n(b + j, m), V::mul(load_n(sp + j, m), vdecay));
      store_n(sp + j, v, m);
      acc0 = V::fmadd(v, load_n(c + j, m), acc0);
    }
    y[p] = V::hsum(V::add(acc0, acc1)) + d * x[p];
  }
}

// y[:n] += a * x[:n]
inline void axpy(float* y, float a, const float* x, int64_t n) {
  const VF va = V::set1_f(a);
  int64_t j = 0;
  for (; j + kW <= n; j += kW) V::store_f(y + j, V::fmadd(va, V::load_f(x + j), V::load_f(y + j)));
  if (j < n) store_n(y + j, V::fmadd(va, load_n(x + j, n - j), load_n(y + j, n - j)), n - j);
}

// The gated delta rule's step for one head (kernels/ops.h deltanet_step).
void deltanet_step_kernel(float* s, int64_t dk, int64_t dv, const float* q, const float* k, const float* v, float g,
                          float beta, float scale, float* o, float* tmp) {
  // Pass 1: S *= g; tmp = S^T k.
  const VF vg = V::set1_f(g);
  std::fill(tmp, tmp + dv, 0.0f);
  for (int64_t i = 0; i < dk; ++i) {
    float* row = s + i * dv;
    const VF ki = V::set1_f(k[i]);
    int64_t j = 0;
    for (; j + kW <= dv; j += kW) {
      const VF r = V::mul(V::load_f(row + j), vg);
      V::store_f(row + j, r);
      V::store_f(tmp + j, V::fmadd(ki, r, V::load_f(tmp + j)));
    }
    if (j < dv) {
      const int64_t m = dv - j;
      const VF r = V::mul(load_n(row + j, m), vg);
      store_n(row + j, r, m);
      store_n(tmp + j, V::fmadd(ki, r, load_n(tmp + j, m)), m);
    }
  }
  // delta = beta (v - S^T k); pass 2: S += k delta^T; o = S^T q * scale.
  for (int64_t j = 0; j < dv; ++j) tmp[j] = (v[j] - tmp[j]) * beta;
  std::fill(o, o + dv, 0.0f);
  for (int64_t i = 0; i < dk; ++i) {
    float* row = s + i * dv;
    const VF ki = V::set1_f(k[i]), qi = V::set1_f(q[i] * scale);
    int64_t j = 0;
    for (; j + kW <= dv; j += kW) {
      const VF r = V::fmadd(ki, V::load_f(tmp + j), V::load_f(row + j));
      V::store_f(row + j, r);
      V::store_f(o + j, V::fmadd(qi, r, V::load_f(o + j)));
    }
    if (j < dv) {
      const int64_t m = dv - j;
      const VF r = V::fmadd(ki, load_n(tmp + j, m), load_n(row + j, m));
      store_n(row + j, r, m);
      store_n(o + j, V::fmadd(qi, r, load_n(o + j, m)), m);
    }
  }
}

void register_ops(IsaKernels& k) {
  k.ssm_step = ssm_step_kernel;
  k.deltanet_step = deltanet_step_kernel;
  k.dot_f32 = dot_f32_kernel;
  k.rms_norm = rms_norm_kernel;
  k.swiglu = swiglu_kernel;
  k.add = add_kernel;
  k.quantize_q8_32 = quantize_q8_32_kernel;
  k.quantize_q8_k = quantize_q8_k_kernel;
  k.quantize_q8_row = quantize_q8_row_kernel;
}

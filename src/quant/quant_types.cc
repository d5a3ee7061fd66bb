#include "quant/quant_types.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>

namespace pagoda::quant {
namespace {

struct MixRow {
  std::string_view name;
  uint32_t ftype;
  DType base;
};

// llama.cpp's LLAMA_FTYPE_* ids.
constexpr std::array kMixes = {
    MixRow{"F32", 0, DType::kF32},      MixRow{"F16", 1, DType::kF16},        MixRow{"BF16", 32, DType::kBF16},
    MixRow{"Q4_0", 2, DType::kQ4_0},    MixRow{"Q4_1", 3, DType::kQ4_1},      MixRow{"Q8_0", 7, DType::kQ8_0},
    MixRow{"Q5_0", 8, DType::kQ5_0},    MixRow{"Q5_1", 9, DType::kQ5_1},      MixRow{"Q4_K_S", 14, DType::kQ4_K},
    MixRow{"Q4_K_M", 15, DType::kQ4_K}, MixRow{"Q5_K_S", 16, DType::kQ5_K},   MixRow{"Q5_K_M", 17, DType::kQ5_K},
    MixRow{"Q6_K", 18, DType::kQ6_K},   MixRow{"Q3_K_S", 11, DType::kQ3_K},   MixRow{"Q3_K_M", 12, DType::kQ3_K},
    MixRow{"Q3_K_L", 13, DType::kQ3_K}, MixRow{"IQ4_NL", 25, DType::kIQ4_NL}, MixRow{"IQ4_XS", 30, DType::kIQ4_XS},
    MixRow{"Q2_K", 10, DType::kQ2_K},   MixRow{"Q2_K_S", 21, DType::kQ2_K},
};

// Known to llama.cpp, without kernels here yet.
constexpr std::array<std::string_view, 5> kNotYet = {"IQ3_M", "IQ3_XXS", "IQ2_XS", "IQ2_XXS", "TQ1_0"};

std::string upper(std::string_view s) {
  std::string u(s);
  for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return u;
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// "blk.N." -> N, or -1.
int layer_of(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  int layer = -1;
  const auto* begin = name.data() + 4;
  const auto [end, ec] = std::from_chars(begin, name.data() + name.size(), layer);
  if (ec != std::errc() || end == name.data() + name.size() || *end != '.') return -1;
  return layer;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers and
// every third one between them get more bits.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

DType fallback(DType t) {
  switch (t) {
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kIQ4_XS: return DType::kIQ4_NL;
    case DType::kQ4_K: return DType::kQ5_0;
    case DType::kQ5_K: return DType::kQ5_1;
    case DType::kQ6_K: return DType::kQ8_0;
    default: return DType::kF16;
  }
}

}  // namespace

Result<QuantMix> parse_quant_mix(std::string_view name) {
  std::string u = upper(name);
  if (u == "Q4_K") u = "Q4_K_M";  // llama-quantize's aliases
  if (u == "Q5_K") u = "Q5_K_M";
  if (u == "Q3_K") u = "Q3_K_M";
  for (const MixRow& r : kMixes)
    if (r.name == u) return QuantMix{std::string(r.name), r.ftype, r.base};
  if (std::find(kNotYet.begin(), kNotYet.end(), u) != kNotYet.end())
    return unimplemented("quantization type " + u +
                         " is not supported yet (no kernels for it); supported: " + quant_mix_names());
  return invalid_argument("unknown quantization type '" + std::string(name) + "'; supported: " + quant_mix_names());
}

std::string quant_mix_names() {
  std::string s;
  for (const MixRow& r : kMixes) {
    if (!s.empty()) s += ", ";
    s += r.name;
  }
  return s;
}

bool is_quantizable(std::string_view name, int num_dims) {
  if (num_dims < 2) return false;
  if (name.size() < 6 || name.substr(name.size() - 6) != "weight") return false;
  if (contains(name, "_norm.weight") || contains(name, "ffn_gate_inp.weight")) return false;
  if (name == "position_embd.weight" || name == "token_types.weight") return false;
  return true;
}

DType tensor_type(const QuantMix& mix, const ModelShape& shape, std::string_view name, int64_t row_len) {
  DType t = mix.base;
  const bool quantized = dtype_block_size(t) > 1;
  const int n = std::max(shape.num_layers, 1);
  const int layer = layer_of(name);
  const std::string& m = mix.name;
  if (quantized) {
    if (name == "output.weight" || (!shape.has_output && name == "token_embd.weight")) {
      if (row_len % kQK_K != 0)
        t = DType::kQ8_0;
      else if (t != DType::kQ8_0)
        t = DType::kQ6_K;
    } else if (contains(name, "attn_v.weight")) {
      if (m == "Q2_K") t = shape.gqa >= 4 ? DType::kQ4_K : DType::kQ3_K;
      if (m == "Q2_K_S" && shape.gqa >= 4) t = DType::kQ4_K;
      if (m == "Q3_K_M") t = layer < 2 ? DType::kQ5_K : DType::kQ4_K;
      if (m == "Q3_K_L") t = DType::kQ5_K;
      if ((m == "IQ4_NL" || m == "IQ4_XS") && shape.gqa >= 4) t = DType::kQ5_K;
      if ((m == "Q4_K_M" || m == "Q5_K_M") && use_more_bits(layer, n)) t = DType::kQ6_K;
      if (m == "Q4_K_S" && layer < 4) t = DType::kQ5_K;
      if (shape.num_experts == 8) t = DType::kQ8_0;
    } else if (contains(name, "attn_k.weight")) {
      if (shape.num_experts == 8) t = DType::kQ8_0;
    } else if (contains(name, "attn_output.weight")) {
      if (shape.num_experts == 8 && (m == "Q2_K" || m == "Q3_K_M" || m == "Q3_K_L")) t = DType::kQ5_K;
      if (shape.num_experts != 8 && m == "Q2_K") t = DType::kQ3_K;
      if (shape.num_experts != 8 && m == "Q3_K_M") t = DType::kQ4_K;
      if (shape.num_experts != 8 && m == "Q3_K_L") t = DType::kQ5_K;
    } else if (contains(name, "ffn_down")) {
      if (m == "Q2_K") t = DType::kQ3_K;
      if (m == "Q2_K_S" && layer < n / 8) t = DType::kQ4_K;
      if (m == "Q3_K_M") t = layer < n / 16 ? DType::kQ5_K : DType::kQ4_K;
      if (m == "Q3_K_L") t = DType::kQ5_K;
      if ((m == "IQ4_NL" || m == "IQ4_XS") && layer < n / 8 && !shape.has_imatrix) t = DType::kQ5_K;
      if (m == "Q4_K_M" && use_more_bits(layer, n)) t = DType::kQ6_K;
      if (m == "Q5_K_M" && use_more_bits(layer, n)) t = DType::kQ6_K;
      if (m == "Q4_K_S" && layer < n / 8) t = DType::kQ5_K;
      if ((m == "Q4_0" || m == "Q5_0") && shape.has_imatrix && layer < n / 8)
        t = m == "Q4_0" ? DType::kQ4_1 : DType::kQ5_1;
    }
  }
  if (row_len % dtype_block_size(t) != 0) {
    t = fallback(t);
    if (row_len % dtype_block_size(t) != 0) t = DType::kF16;
  }
  return t;
}

}  // namespace pagoda::quant

#include "testing/make_model.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <tuple>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "kernels/ref/quant_ref.h"
#include "testing/builtin_vocab.h"

namespace pagoda {
namespace {

using gguf::Value;

// qwen35: every 4th layer attends (llama.cpp's default interval).
constexpr int32_t kFullAttentionInterval = 4;

struct Preset {
  const char* name;
  const char* arch = "llama";
  int32_t num_layers, hidden_size, num_heads, num_kv_heads, ffn_size, vocab_size, train_context_len;
  int32_t head_dim = 0;  // 0: hidden_size / num_heads
  float rope_base = 10000.0f;
  int32_t num_experts = 0, num_experts_used = 0, expert_ffn_size = 0;
  int32_t sliding_window = 0;  // with the architecture's period
  float yarn_factor = 0;       // > 0: YaRN rope scaling from a 4096-token original context
  // Gated DeltaNet layers (qwen35): conv kernel, key head size, key heads,
  // value heads, value heads x value head size; every 4th layer attends.
  int32_t ssm_conv_kernel = 0, ssm_state_size = 0, ssm_group_count = 0, ssm_time_step_rank = 0, ssm_inner_size = 0;
  int32_t rwkv_head_size = 0;  // rwkv7's wkv head size
};

// Real models' shapes (random weights): the small ones as published, the MoE
// ones with fewer layers / experts so they fit in a laptop's memory.
constexpr Preset kPresets[] = {
    {.name = "tiny",
     .num_layers = 2,
     .hidden_size = 64,
     .num_heads = 4,
     .num_kv_heads = 2,
     .ffn_size = 128,
     .vocab_size = 512,
     .train_context_len = 512},
    {.name = "tiny-mha",
     .num_layers = 2,
     .hidden_size = 64,
     .num_heads = 4,
     .num_kv_heads = 4,
     .ffn_size = 128,
     .vocab_size = 512,
     .train_context_len = 512},
    {.name = "110m",
     .num_layers = 12,
     .hidden_size = 768,
     .num_heads = 12,
     .num_kv_heads = 12,
     .ffn_size = 2048,
     .vocab_size = 32000,
     .train_context_len = 2048},
    {.name = "tinyllama-1.1b",
     .num_layers = 22,
     .hidden_size = 2048,
     .num_heads = 32,
     .num_kv_heads = 4,
     .ffn_size = 5632,
     .vocab_size = 32000,
     .train_context_len = 2048},
    // Qwen3-0.6B: head_dim 128, so q is 2048 wide on a 1024 residual.
    {.name = "qwen3-0.6b",
     .arch = "qwen3",
     .num_layers = 28,
     .hidden_size = 1024,
     .num_heads = 16,
     .num_kv_heads = 8,
     .ffn_size = 3072,
     .vocab_size = 151936,
     .train_context_len = 40960,
     .head_dim = 128,
     .rope_base = 1e6f},
    // A Qwen3.5 / Qwen3-Next-style hybrid, scaled down: Gated DeltaNet
    // layers (16 key heads, 32 value heads of 128) with gated full attention
    // every 4th layer (16 query / 2 KV heads of 256).
    {.name = "qwen35-hybrid",
     .arch = "qwen35",
     .num_layers = 24,
     .hidden_size = 1024,
     .num_heads = 8,
     .num_kv_heads = 2,
     .ffn_size = 3584,
     .vocab_size = 151936,
     .train_context_len = 262144,
     .head_dim = 256,
     .rope_base = 1e7f,
     .ssm_conv_kernel = 4,
     .ssm_state_size = 128,
     .ssm_group_count = 16,
     .ssm_time_step_rank = 32,
     .ssm_inner_size = 4096},
    // Mamba2-370m's shape: 48 Mamba-2 layers, inner 2048 in 32 heads of 64, state 128.
    {.name = "mamba2-370m",
     .arch = "mamba2",
     .num_layers = 48,
     .hidden_size = 1024,
     .num_heads = 1,  // no attention
     .num_kv_heads = 1,
     .ffn_size = 1,  // no FFN
     .vocab_size = 50288,
     .train_context_len = 1048576,
     .ssm_conv_kernel = 4,
     .ssm_state_size = 128,
     .ssm_group_count = 1,
     .ssm_time_step_rank = 32,
     .ssm_inner_size = 2048},
    // RWKV-7 World 0.1B's shape: 12 layers of 768 in heads of 64, 65k vocabulary.
    {.name = "rwkv7-0.1b",
     .arch = "rwkv7",
     .num_layers = 12,
     .hidden_size = 768,
     .num_heads = 1,  // no attention
     .num_kv_heads = 1,
     .ffn_size = 3072,
     .vocab_size = 65536,
     .train_context_len = 1048576,
     .rwkv_head_size = 64},
    // Gemma-3-1B: 5 sliding-window (512) layers per global one, 262k vocabulary.
    {.name = "gemma3-1b",
     .arch = "gemma3",
     .num_layers = 26,
     .hidden_size = 1152,
     .num_heads = 4,
     .num_kv_heads = 1,
     .ffn_size = 6912,
     .vocab_size = 262144,
     .train_context_len = 32768,
     .head_dim = 256,
     .rope_base = 1e6f,
     .sliding_window = 512},
    // Qwen3-30B-A3B's layer (2048 wide, 32/4 heads of 128, experts of 768,
    // 8 routed) with 8 of its 48 layers and 64 of its 128 experts.
    {.name = "qwen3-moe-mini",
     .arch = "qwen3moe",
     .num_layers = 8,
     .hidden_size = 2048,
     .num_heads = 32,
     .num_kv_heads = 4,
     .ffn_size = 6144,
     .vocab_size = 151936,
     .train_context_len = 40960,
     .head_dim = 128,
     .rope_base = 1e6f,
     .num_experts = 64,
     .num_experts_used = 8,
     .expert_ffn_size = 768},
    // gpt-oss-20b's layer (2880 wide, 64/8 heads of 64, sinks, window 128 on
    // every other layer, experts of 2880, 4 routed, YaRN x32) with 4 of its
    // 24 layers and 16 of its 32 experts.
    {.name = "gpt-oss-mini",
     .arch = "gpt-oss",
     .num_layers = 4,
     .hidden_size = 2880,
     .num_heads = 64,
     .num_kv_heads = 8,
     .ffn_size = 2880,
     .vocab_size = 201088,
     .train_context_len = 131072,
     .head_dim = 64,
     .rope_base = 150000.0f,
     .num_experts = 16,
     .num_experts_used = 4,
     .expert_ffn_size = 2880,
     .sliding_window = 128,
     .yarn_factor = 32.0f},
};

constexpr DType kMakeModelDTypes[] = {
    DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0,   DType::kQ4_1,   DType::kQ5_0, DType::kQ5_1,
    DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ3_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kQ2_K,
};

bool is_quantized(DType t) { return dtype_block_size(t) > 1; }

// llama.cpp keeps the output projection at higher precision for 4/5-bit types.
DType output_type(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ3_K:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS: return DType::kQ6_K;
    default: return t;
  }
}

int64_t head_dim_of(const ModelConfig& s) {
  if (s.head_dim > 0) return s.head_dim;
  return s.num_heads > 0 ? s.hidden_size / s.num_heads : 0;
}

Status validate_shape(const ModelConfig& s) {
  ModelConfig traits;
  PAGODA_RETURN_IF_ERROR(set_arch_traits(&traits, s.arch));
  const bool mamba2 = s.arch == "mamba2";
  if (s.arch == "rwkv7" && (s.rwkv_head_size < 1 || s.hidden_size % s.rwkv_head_size != 0))
    return invalid_argument("an rwkv7 model needs a wkv head size dividing the hidden size (the rwkv7-0.1b preset)");
  if ((traits.attn_output_gate || mamba2) &&
      (s.ssm_conv_kernel < 2 || s.ssm_conv_kernel > 64 || s.ssm_state_size < 1 || s.ssm_group_count < 1 ||
       s.ssm_time_step_rank < 1 || s.ssm_time_step_rank % s.ssm_group_count != 0 || s.ssm_inner_size < 1 ||
       s.ssm_inner_size % s.ssm_time_step_rank != 0))
    return invalid_argument("a " + s.arch +
                            " model needs its ssm sizes (the qwen35-hybrid and mamba2-370m presets have them)");
  if (arch_is_moe(s.arch) && (s.num_experts < 1 || s.num_experts_used < 1 || s.expert_ffn_size < 1 ||
                              s.num_experts_used > s.num_experts || s.num_experts > 4096)) {
    return invalid_argument(
        "a mixture-of-experts model needs 1 <= experts used <= experts <= 4096 and an expert width");
  }
  struct Limit {
    const char* name;
    int64_t value, max;
  };
  const Limit limits[] = {
      {"num_layers", s.num_layers, 1024},
      {"hidden_size", s.hidden_size, 65536},
      {"num_heads", s.num_heads, 4096},
      {"num_kv_heads", s.num_kv_heads, 4096},
      {"ffn_size", s.ffn_size, 1 << 20},
      {"vocab_size", s.vocab_size, 1 << 22},
      {"train_context_len", s.train_context_len, 1 << 24},
  };
  for (const auto& l : limits) {
    if (l.value < 1 || l.value > l.max) {
      return invalid_argument(std::string(l.name) + " must be in [1, " + std::to_string(l.max) + "], got " +
                              std::to_string(l.value));
    }
  }
  if (s.head_dim <= 0 && s.hidden_size % s.num_heads != 0) {
    return invalid_argument("hidden_size (" + std::to_string(s.hidden_size) + ") must be a multiple of num_heads (" +
                            std::to_string(s.num_heads) + ")");
  }
  if (head_dim_of(s) % 2 != 0) {
    return invalid_argument("head dim hidden_size / num_heads = " + std::to_string(head_dim_of(s)) +
                            " must be even (RoPE rotates pairs)");
  }
  if (s.num_heads % s.num_kv_heads != 0) {
    return invalid_argument("num_heads (" + std::to_string(s.num_heads) + ") must be a multiple of num_kv_heads (" +
                            std::to_string(s.num_kv_heads) + ")");
  }
  if (!(s.rope_freq_base > 0) || !(s.rms_eps > 0)) {
    return invalid_argument("rope base and rms eps must be positive");
  }
  return Status::ok();
}

// Tensor kinds that share a fallback get one note: "blk.3.ffn_down.weight"
// counts under "ffn_down.weight".
std::string tensor_kind(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return name;
  const size_t dot = name.find('.', 4);
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

class PlanBuilder {
 public:
  void add(std::string name, std::vector<int64_t> dims, DType want, double mean, double stddev) {
    const DType type = fit_type(name, want, dims[0]);
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    plan_.num_params += n;
    plan_.num_bytes += dtype_row_bytes(type, dims[0]) * static_cast<uint64_t>(n / dims[0]);
    plan_.tensors.push_back({std::move(name), std::move(dims), type, mean, stddev});
  }

  ModelPlan finish() {
    for (const auto& [key, fb] : fallbacks_) {
      const auto& [row, want, got] = key;
      std::string kinds;
      for (const auto& k : fb.kinds) {
        if (!kinds.empty()) kinds += ", ";
        kinds += k;
      }
      plan_.notes.push_back("rows of " + std::to_string(row) + " are not a multiple of " +
                            std::to_string(dtype_block_size(want)) + ": " + std::to_string(fb.count) +
                            (fb.count == 1 ? " tensor uses " : " tensors use ") + std::string(dtype_name(got)) +
                            " instead of " + std::string(dtype_name(want)) + " (" + kinds + ")");
    }
    return std::move(plan_);
  }

 private:
  struct Fallback {
    std::set<std::string> kinds;
    int count = 0;
  };
  using FallbackKey = std::tuple<int64_t, DType, DType>;  // row length, wanted, used

  DType fit_type(const std::string& name, DType want, int64_t row) {
    if (row % dtype_block_size(want) == 0) return want;
    DType got = DType::kF16;
    if (dtype_block_size(want) == kQK_K && row % dtype_block_size(DType::kQ8_0) == 0) got = DType::kQ8_0;
    Fallback& fb = fallbacks_[FallbackKey{row, want, got}];
    fb.kinds.insert(tensor_kind(name));
    ++fb.count;
    return got;
  }

  ModelPlan plan_;
  std::map<FallbackKey, Fallback> fallbacks_;
};

// --- weights -----------------------------------------------------------

uint64_t mix64(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// mean + stddev * (approximately standard normal): the sum of the four
// 16-bit lanes of one splitmix64 output (Irwin-Hall, bounded to +-3.46
// sigma), about 1 ns per element. Each row has its own stream, so the
// output does not depend on the number of threads.
void fill_row(float* dst, int64_t n, uint64_t row_seed, double mean, double stddev) {
  static const double kInvSd = 1.0 / std::sqrt((65536.0 * 65536.0 - 1.0) / 3.0);
  const float scale = static_cast<float>(stddev * kInvSd);
  const float m = static_cast<float>(mean);
  uint64_t s = row_seed;
  for (int64_t i = 0; i < n; ++i) {
    s += 0x9E3779B97F4A7C15ull;
    const uint64_t z = mix64(s);
    const int64_t sum =
        static_cast<int64_t>((z & 0xffff) + ((z >> 16) & 0xffff) + ((z >> 32) & 0xffff) + (z >> 48)) - 131070;
    dst[i] = m + scale * static_cast<float>(sum);
  }
}

void encode_row(DType type, const float* src, void* dst, int64_t n) {
  switch (type) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = fp32_to_fp16(src[i]);
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = fp32_to_bf16(src[i]);
      break;
    default: ref::quantize_row(type, src, dst, n);
  }
}

struct TensorBytes {
  std::unique_ptr<uint8_t[]> data;
  size_t size = 0;
};

TensorBytes generate_tensor(const PlannedTensor& t, uint64_t seed, ThreadPool& pool) {
  const int64_t row = t.dims[0];
  int64_t rows = 1;
  for (size_t k = 1; k < t.dims.size(); ++k) rows *= t.dims[k];
  const size_t row_bytes = dtype_row_bytes(t.type, row);
  TensorBytes out;
  out.size = row_bytes * static_cast<size_t>(rows);
  out.data.reset(new uint8_t[out.size]);
  const uint64_t tensor_seed = mix64(seed ^ fnv1a(t.name));
  pool.parallel_for(rows, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(static_cast<size_t>(row));
    for (int64_t r = begin; r < end; ++r) {
      fill_row(scratch.data(), row, mix64(tensor_seed + static_cast<uint64_t>(r) * 0xD1B54A32D192ED03ull), t.mean,
               t.stddev);
      encode_row(t.type, scratch.data(), out.data.get() + row_bytes * static_cast<size_t>(r), row);
    }
  });
  return out;
}

// --- metadata ----------------------------------------------------------

void set_hparams(const ModelConfig& s, const MakeModelOptions& opts, gguf::GGUFWriter& w) {
  auto u32 = [](int64_t v) { return Value::make_u32(static_cast<uint32_t>(v)); };
  w.set("general.architecture", Value::make_string(s.arch));
  w.set("general.name", Value::make_string(opts.name));
  w.set("general.file_type", Value::make_u32(llama_file_type(opts.dtype)));
  if (is_quantized(opts.dtype)) w.set("general.quantization_version", Value::make_u32(2));
  const std::string p = s.arch + ".";
  w.set(p + "vocab_size", u32(s.vocab_size));
  w.set(p + "context_length", u32(s.train_context_len));
  w.set(p + "embedding_length", u32(s.hidden_size));
  w.set(p + "block_count", u32(s.num_layers));
  w.set(p + "feed_forward_length", u32(s.ffn_size));
  w.set(p + "attention.head_count", u32(s.num_heads));
  w.set(p + "attention.head_count_kv", u32(s.num_kv_heads));
  w.set(p + "attention.key_length", u32(head_dim_of(s)));
  w.set(p + "attention.value_length", u32(head_dim_of(s)));
  w.set(p + "rope.dimension_count", u32(head_dim_of(s)));
  w.set(p + "rope.freq_base", Value::make_f32(static_cast<float>(s.rope_freq_base)));
  w.set(p + "attention.layer_norm_rms_epsilon", Value::make_f32(static_cast<float>(s.rms_eps)));
  if (s.rope_ext_factor > 0) {
    w.set(p + "rope.scaling.type", Value::make_string("yarn"));
    w.set(p + "rope.scaling.factor", Value::make_f32(1.0f / s.rope_freq_scale));
    w.set(p + "rope.scaling.original_context_length", u32(s.rope_orig_ctx));
  }
  if (s.sliding_window > 0) {
    w.set(p + "attention.sliding_window", u32(s.sliding_window));
    w.set(p + "attention.sliding_window_pattern", u32(s.swa_period));
  }
  if (s.rwkv_head_size > 0) {
    w.set(p + "wkv.head_size", u32(s.rwkv_head_size));
    w.set(p + "attention.layer_norm_epsilon", Value::make_f32(1e-5f));
  }
  if (s.ssm_inner_size > 0) {
    w.set(p + "ssm.conv_kernel", u32(s.ssm_conv_kernel));
    w.set(p + "ssm.state_size", u32(s.ssm_state_size));
    w.set(p + "ssm.group_count", u32(s.ssm_group_count));
    w.set(p + "ssm.time_step_rank", u32(s.ssm_time_step_rank));
    w.set(p + "ssm.inner_size", u32(s.ssm_inner_size));
    w.set(p + "full_attention_interval", u32(kFullAttentionInterval));
  }
  if (arch_is_moe(s.arch)) {
    w.set(p + "expert_count", u32(s.num_experts));
    w.set(p + "expert_used_count", u32(s.num_experts_used));
    w.set(p + "expert_feed_forward_length", u32(s.expert_ffn_size));
  }
}

void set_builtin_vocab(BuiltinVocab vocab, gguf::GGUFWriter& w) {
  w.set("tokenizer.ggml.model", Value::make_string("gpt2"));
  w.set("tokenizer.ggml.pre", Value::make_string("gpt-2"));
  w.set("tokenizer.ggml.tokens", Value::make_string_array(std::move(vocab.tokens)));
  w.set("tokenizer.ggml.token_type", Value::make_i32_array(std::move(vocab.token_types)));
  w.set("tokenizer.ggml.merges", Value::make_string_array(std::move(vocab.merges)));
  w.set("tokenizer.ggml.bos_token_id", Value::make_u32(static_cast<uint32_t>(vocab.bos_id)));
  w.set("tokenizer.ggml.eos_token_id", Value::make_u32(static_cast<uint32_t>(vocab.eos_id)));
  w.set("tokenizer.ggml.unknown_token_id", Value::make_u32(static_cast<uint32_t>(vocab.unk_id)));
  w.set("tokenizer.ggml.add_bos_token", Value::make_bool(true));
  w.set("tokenizer.ggml.add_eos_token", Value::make_bool(false));
}

// The writer renames a temporary file over `path`: fail early, before minutes
// of work, when that cannot succeed.
Status check_writable(const std::string& path) {
  if (path.empty()) return invalid_argument("no output file given");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return invalid_argument("cannot write '" + path + "': it is a directory");
  }
  const std::string probe = path + ".probe." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return invalid_argument("cannot write '" + path + "': " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::ok();
}

}  // namespace

Result<ModelConfig> model_preset(std::string_view name) {
  for (const auto& p : kPresets) {
    if (name != p.name) continue;
    ModelConfig s;
    PAGODA_RETURN_IF_ERROR(set_model_arch(&s, p.arch));
    s.num_layers = p.num_layers;
    s.hidden_size = p.hidden_size;
    s.num_heads = p.num_heads;
    s.num_kv_heads = p.num_kv_heads;
    s.ffn_size = p.ffn_size;
    s.vocab_size = p.vocab_size;
    s.train_context_len = p.train_context_len;
    s.head_dim = p.head_dim;
    s.rope_freq_base = p.rope_base;
    s.num_experts = p.num_experts;
    s.num_experts_used = p.num_experts_used;
    s.expert_ffn_size = p.expert_ffn_size;
    s.sliding_window = p.sliding_window;
    s.ssm_conv_kernel = p.ssm_conv_kernel;
    s.ssm_state_size = p.ssm_state_size;
    s.ssm_group_count = p.ssm_group_count;
    s.ssm_time_step_rank = p.ssm_time_step_rank;
    s.ssm_inner_size = p.ssm_inner_size;
    s.rwkv_head_size = p.rwkv_head_size;
    if (p.yarn_factor > 0) {
      s.rope_ext_factor = 1;
      s.rope_freq_scale = 1.0f / p.yarn_factor;
      s.rope_orig_ctx = 4096;
    }
    return s;
  }
  std::string names;
  for (const auto& n : model_preset_names()) {
    if (!names.empty()) names += ", ";
    names += n;
  }
  return invalid_argument("unknown preset '" + std::string(name) + "' (presets: " + names + ")");
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

Status set_model_arch(ModelConfig* shape, std::string_view arch) {
  PAGODA_RETURN_IF_ERROR(set_arch_traits(shape, arch));
  if (arch != "llama") shape->rope_freq_base = 1e6f;  // the Qwen and Gemma families' base
  return Status::ok();
}

Result<DType> make_model_dtype(std::string_view name) {
  const auto t = dtype_from_name(name);
  for (DType ok : kMakeModelDTypes) {
    if (t && *t == ok) return ok;
  }
  std::string names;
  for (DType ok : kMakeModelDTypes) {
    if (!names.empty()) names += ' ';
    names += dtype_name(ok);
  }
  return invalid_argument("unsupported dtype '" + std::string(name) + "' (choose one of: " + names + ")");
}

uint32_t llama_file_type(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ8_0: return 7;
    case DType::kQ5_0: return 8;
    case DType::kQ5_1: return 9;
    case DType::kQ4_K: return 15;  // Q4_K_M
    case DType::kQ5_K: return 17;  // Q5_K_M
    case DType::kQ6_K: return 18;
    case DType::kQ3_K: return 12;  // Q3_K_M
    case DType::kQ2_K: return 10;
    case DType::kIQ4_NL: return 25;
    case DType::kIQ4_XS: return 30;
    case DType::kBF16: return 32;
    default: return 0;
  }
}

Result<ModelPlan> plan_model(const ModelConfig& s, DType dtype, bool tied_embeddings) {
  PAGODA_RETURN_IF_ERROR(validate_shape(s));
  PAGODA_ASSIGN_OR_RETURN(DType checked, make_model_dtype(dtype_name(dtype)));
  ModelConfig t;  // the architecture's tensor set
  PAGODA_RETURN_IF_ERROR(set_arch_traits(&t, s.arch));
  const bool moe = arch_is_moe(s.arch), gpt_oss = t.has_attn_sinks;
  const int64_t hd = head_dim_of(s), q_dim = s.num_heads * hd, kv_dim = s.num_kv_heads * hd;
  const double in_std = 1.0 / std::sqrt(static_cast<double>(s.hidden_size));
  // Residual branches are scaled down so the stream stays O(1) over num_layers.
  const double depth = 1.0 / std::sqrt(2.0 * static_cast<double>(s.num_layers));
  PlanBuilder b;
  b.add("token_embd.weight", {s.hidden_size, s.vocab_size}, checked, 0, 0.02);
  const bool deltanet = t.attn_output_gate;  // qwen35: Gated DeltaNet layers with gated attention
  const bool mamba2 = s.arch == "mamba2";    // Mamba-2 layers only, no FFN
  const bool rwkv7 = s.arch == "rwkv7";      // LayerNorms with biases, time mix, channel mix
  if (rwkv7) {
    b.add("token_embd_norm.weight", {s.hidden_size}, DType::kF32, 1, 0.02);
    b.add("token_embd_norm.bias", {s.hidden_size}, DType::kF32, 0, 0.02);
  }
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    b.add(p + "attn_norm.weight", {s.hidden_size}, DType::kF32, 1, 0.02);
    if (rwkv7) {
      const int64_t hs = s.hidden_size;
      const std::string tm = p + "time_mix_";
      b.add(p + "attn_norm.bias", {hs}, DType::kF32, 0, 0.02);
      b.add(p + "attn_norm_2.weight", {hs}, DType::kF32, 1, 0.02);
      b.add(p + "attn_norm_2.bias", {hs}, DType::kF32, 0, 0.02);
      b.add(tm + "w0.weight", {hs}, DType::kF32, -0.5, 0.3);
      for (const char* v : {"a0", "v0", "k_k", "k_a", "r_k"}) b.add(tm + v + ".weight", {hs}, DType::kF32, 0, 0.3);
      b.add(tm + "ln.weight", {hs}, DType::kF32, 1, 0.02);
      b.add(tm + "ln.bias", {hs}, DType::kF32, 0, 0.02);
      b.add(tm + "lerp_fused.weight", {hs, 1, 1, 6}, DType::kF32, 0.5, 0.2);
      b.add(p + "channel_mix_lerp_k.weight", {hs}, DType::kF32, 0.5, 0.2);
      // LoRA pairs (RWKV-7 0.1B's ranks): decay, in-context rate, value residual, gate.
      for (const auto& [name, rank] : {std::pair<const char*, int64_t>{"w", 64}, {"a", 64}, {"v", 32}, {"g", 128}}) {
        b.add(tm + name + "1.weight", {hs, rank}, DType::kF32, 0, in_std);
        b.add(tm + name + "2.weight", {rank, hs}, DType::kF32, 0, 0.1 / std::sqrt(static_cast<double>(rank)));
      }
      for (const char* m : {"receptance", "key", "value"}) b.add(tm + m + ".weight", {hs, hs}, checked, 0, in_std);
      b.add(tm + "output.weight", {hs, hs}, checked, 0, depth / std::sqrt(static_cast<double>(hs)));
      b.add(p + "channel_mix_key.weight", {hs, s.ffn_size}, checked, 0, in_std);
      b.add(p + "channel_mix_value.weight", {s.ffn_size, hs}, checked, 0,
            depth / std::sqrt(static_cast<double>(s.ffn_size)));
      continue;
    }
    if (mamba2) {  // in_proj [z, xBC, dt], conv, per-head decay and skip, grouped norm, out_proj
      const int64_t hs = s.hidden_size, inner = s.ssm_inner_size, heads = s.ssm_time_step_rank;
      const int64_t channels = 2 * int64_t{s.ssm_group_count} * s.ssm_state_size + inner;
      b.add(p + "ssm_in.weight", {hs, inner + channels + heads}, checked, 0, in_std);
      b.add(p + "ssm_conv1d.weight", {s.ssm_conv_kernel, channels}, DType::kF32, 0, 0.3);
      b.add(p + "ssm_conv1d.bias", {channels}, DType::kF32, 0, 0.02);
      b.add(p + "ssm_dt.bias", {heads}, DType::kF32, 0, 0.3);
      b.add(p + "ssm_a", {heads}, DType::kF32, -1, 0.2);
      b.add(p + "ssm_d", {heads}, DType::kF32, 1, 0.1);
      b.add(p + "ssm_norm.weight", {inner}, DType::kF32, 1, 0.02);
      b.add(p + "ssm_out.weight", {inner, hs}, checked, 0, depth / std::sqrt(static_cast<double>(inner)));
      continue;
    }
    if (deltanet && (i + 1) % kFullAttentionInterval != 0) {  // a Gated DeltaNet layer, then the FFN
      const int64_t hs = s.hidden_size, inner = s.ssm_inner_size, heads = s.ssm_time_step_rank;
      const int64_t channels = 2 * int64_t{s.ssm_group_count} * s.ssm_state_size + inner;
      b.add(p + "attn_qkv.weight", {hs, channels}, checked, 0, in_std);
      b.add(p + "attn_gate.weight", {hs, inner}, checked, 0, in_std);
      b.add(p + "ssm_beta.weight", {hs, heads}, checked, 0, in_std);
      b.add(p + "ssm_alpha.weight", {hs, heads}, checked, 0, in_std);
      b.add(p + "ssm_conv1d.weight", {s.ssm_conv_kernel, channels}, DType::kF32, 0, 0.3);
      b.add(p + "ssm_dt.bias", {heads}, DType::kF32, 0, 0.3);
      b.add(p + "ssm_a", {heads}, DType::kF32, -1, 0.2);  // -exp(A_log): negative, a decay
      b.add(p + "ssm_norm.weight", {inner / heads}, DType::kF32, 1, 0.02);
      b.add(p + "ssm_out.weight", {inner, hs}, checked, 0, depth / std::sqrt(static_cast<double>(inner)));
      b.add(p + t.ffn_norm_name + ".weight", {hs}, DType::kF32, 1, 0.02);
      b.add(p + "ffn_gate.weight", {hs, s.ffn_size}, checked, 0, in_std);
      b.add(p + "ffn_up.weight", {hs, s.ffn_size}, checked, 0, in_std);
      b.add(p + "ffn_down.weight", {s.ffn_size, hs}, checked, 0, depth / std::sqrt(static_cast<double>(s.ffn_size)));
      continue;
    }
    // Gated attention (qwen35) projects [q, gate] per head.
    b.add(p + "attn_q.weight", {s.hidden_size, t.attn_output_gate ? 2 * q_dim : q_dim}, checked, 0, in_std);
    b.add(p + "attn_k.weight", {s.hidden_size, kv_dim}, checked, 0, in_std);
    b.add(p + "attn_v.weight", {s.hidden_size, kv_dim}, checked, 0, in_std);
    if (t.has_qkv_bias || gpt_oss) {
      b.add(p + "attn_q.bias", {q_dim}, DType::kF32, 0, 0.02);
      b.add(p + "attn_k.bias", {kv_dim}, DType::kF32, 0, 0.02);
      b.add(p + "attn_v.bias", {kv_dim}, DType::kF32, 0, 0.02);
    }
    if (t.has_qk_norm) {
      b.add(p + "attn_q_norm.weight", {hd}, DType::kF32, 1, 0.02);
      b.add(p + "attn_k_norm.weight", {hd}, DType::kF32, 1, 0.02);
    }
    b.add(p + "attn_output.weight", {q_dim, s.hidden_size}, checked, 0, depth / std::sqrt(static_cast<double>(q_dim)));
    if (gpt_oss) {
      b.add(p + "attn_output.bias", {s.hidden_size}, DType::kF32, 0, 0.02);
      b.add(p + "attn_sinks.weight", {s.num_heads}, DType::kF32, 0, 1);
    }
    if (t.has_post_norms) b.add(p + "post_attention_norm.weight", {s.hidden_size}, DType::kF32, 1, 0.02);
    b.add(p + t.ffn_norm_name + ".weight", {s.hidden_size}, DType::kF32, 1, 0.02);
    if (moe) {
      const int64_t ne = s.num_experts, ef = s.expert_ffn_size;
      b.add(p + "ffn_gate_inp.weight", {s.hidden_size, ne}, DType::kF32, 0, in_std);  // llama.cpp keeps routers f32
      b.add(p + "ffn_gate_exps.weight", {s.hidden_size, ef, ne}, checked, 0, in_std);
      b.add(p + "ffn_up_exps.weight", {s.hidden_size, ef, ne}, checked, 0, in_std);
      b.add(p + "ffn_down_exps.weight", {ef, s.hidden_size, ne}, checked, 0,
            depth / std::sqrt(static_cast<double>(ef)));
      if (gpt_oss) {
        b.add(p + "ffn_gate_inp.bias", {ne}, DType::kF32, 0, 0.02);
        b.add(p + "ffn_gate_exps.bias", {ef, ne}, DType::kF32, 0, 0.02);
        b.add(p + "ffn_up_exps.bias", {ef, ne}, DType::kF32, 0, 0.02);
        b.add(p + "ffn_down_exps.bias", {s.hidden_size, ne}, DType::kF32, 0, 0.02);
      }
    } else {
      b.add(p + "ffn_gate.weight", {s.hidden_size, s.ffn_size}, checked, 0, in_std);
      b.add(p + "ffn_up.weight", {s.hidden_size, s.ffn_size}, checked, 0, in_std);
      b.add(p + "ffn_down.weight", {s.ffn_size, s.hidden_size}, checked, 0,
            depth / std::sqrt(static_cast<double>(s.ffn_size)));
    }
    if (t.has_post_norms) b.add(p + "post_ffw_norm.weight", {s.hidden_size}, DType::kF32, 1, 0.02);
  }
  b.add("output_norm.weight", {s.hidden_size}, DType::kF32, 1, 0.02);
  if (rwkv7) b.add("output_norm.bias", {s.hidden_size}, DType::kF32, 0, 0.02);
  if (!tied_embeddings) b.add("output.weight", {s.hidden_size, s.vocab_size}, output_type(checked), 0, in_std);
  return b.finish();
}

Result<ModelPlan> make_model(const MakeModelOptions& opts, const std::string& path) {
  ModelConfig shape = opts.config;
  gguf::GGUFWriter writer;
  std::unique_ptr<gguf::GGUFFile> vocab_file;
  if (!opts.vocab_from.empty()) {
    auto f = gguf::GGUFFile::open(opts.vocab_from);
    if (!f.is_ok()) return Status(f.status().code(), "--vocab-from: " + f.status().message());
    vocab_file = std::move(f).value();
    const auto* tokens = vocab_file->get_string_array("tokenizer.ggml.tokens");
    if (!tokens || tokens->empty()) {
      return invalid_argument("--vocab-from: '" + opts.vocab_from + "' has no tokenizer.ggml.tokens");
    }
    if (tokens->size() > (1u << 22)) return invalid_argument("--vocab-from: the vocabulary is too large");
    shape.vocab_size = static_cast<int32_t>(tokens->size());
  }
  PAGODA_ASSIGN_OR_RETURN(ModelPlan plan, plan_model(shape, opts.dtype, opts.tied_embeddings));
  set_hparams(shape, opts, writer);
  if (vocab_file) {
    for (const auto& [key, value] : vocab_file->metadata()) {
      if (key.rfind("tokenizer.", 0) == 0) writer.set(key, value);
    }
  } else {
    PAGODA_ASSIGN_OR_RETURN(BuiltinVocab vocab, make_builtin_vocab(shape.vocab_size));
    set_builtin_vocab(std::move(vocab), writer);
  }
  PAGODA_RETURN_IF_ERROR(check_writable(path));

  std::vector<TensorBytes> data;
  data.reserve(plan.tensors.size());
  try {
    ThreadPool pool(opts.num_threads > 0 ? opts.num_threads : default_num_threads());
    for (const auto& t : plan.tensors) {
      data.push_back(generate_tensor(t, opts.seed, pool));
      writer.add_tensor(t.name, t.dims, t.type, data.back().data.get(), data.back().size);
    }
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory holding " + std::to_string(plan.num_bytes >> 20) + " MiB of weights");
  }
  PAGODA_RETURN_IF_ERROR(writer.write(path));
  return plan;
}

}  // namespace pagoda

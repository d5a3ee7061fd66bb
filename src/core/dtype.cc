#include "core/dtype.h"

#include "core/check.h"

namespace pagoda {
namespace {

constexpr DTypeInfo kInfos[] = {
    {DType::kF32, "f32", 1, 4, true},         {DType::kF16, "f16", 1, 2, true},
    {DType::kQ4_0, "q4_0", 32, 18, true},     {DType::kQ4_1, "q4_1", 32, 20, true},
    {DType::kQ5_0, "q5_0", 32, 22, true},     {DType::kQ5_1, "q5_1", 32, 24, true},
    {DType::kQ8_0, "q8_0", 32, 34, true},     {DType::kQ8_1, "q8_1", 32, 36, false},
    {DType::kQ2_K, "q2_k", 256, 84, true},    {DType::kQ3_K, "q3_k", 256, 110, true},
    {DType::kQ4_K, "q4_k", 256, 144, true},   {DType::kQ5_K, "q5_k", 256, 176, true},
    {DType::kQ6_K, "q6_k", 256, 210, true},   {DType::kQ8_K, "q8_k", 256, 292, false},
    {DType::kI8, "i8", 1, 1, false},          {DType::kI16, "i16", 1, 2, false},
    {DType::kI32, "i32", 1, 4, false},        {DType::kI64, "i64", 1, 8, false},
    {DType::kF64, "f64", 1, 8, false},        {DType::kBF16, "bf16", 1, 2, true},
    {DType::kIQ4_NL, "iq4_nl", 32, 18, true}, {DType::kIQ4_XS, "iq4_xs", 256, 136, true},
};

}  // namespace

std::optional<DTypeInfo> dtype_info(uint32_t id) {
  for (const auto& i : kInfos)
    if (static_cast<uint32_t>(i.type) == id) return i;
  return std::nullopt;
}

const DTypeInfo& dtype_info(DType t) {
  for (const auto& i : kInfos)
    if (i.type == t) return i;
  PAGODA_CHECK(false && "unknown DType");
  return kInfos[0];
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kInfos) {
    if (i.name.size() != name.size()) continue;
    bool eq = true;
    for (size_t k = 0; k < name.size(); ++k) {
      char c = name[k];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c != i.name[k]) eq = false;
    }
    if (eq) return i.type;
  }
  return std::nullopt;
}

}  // namespace pagoda

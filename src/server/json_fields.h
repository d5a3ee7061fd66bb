// Strict readers for fields of a JSON request object: a field that is absent
// or null keeps its default; a present field of the wrong type or out of
// range is an ApiError naming the field (HTTP 400).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"

namespace pagoda::server {

using MaybeError = std::optional<ApiError>;

class FieldReader {
 public:
  explicit FieldReader(const nlohmann::json& obj) : obj_(obj) {}

  // nullptr when the field is absent or null.
  const nlohmann::json* find(const char* key) const;
  MaybeError read_bool(const char* key, bool* out) const;
  // Integers (an integral float such as 16.0 is accepted) in [lo, hi].
  MaybeError read_int(const char* key, int64_t lo, int64_t hi, int64_t* out) const;
  MaybeError read_int32(const char* key, int64_t lo, int64_t hi, int32_t* out) const;
  // Finite numbers in [lo, hi].
  MaybeError read_float(const char* key, double lo, double hi, float* out) const;
  MaybeError read_string(const char* key, std::string* out) const;
  // Only checks the type of a field we accept but do not use.
  MaybeError expect_type(const char* key, nlohmann::json::value_t type) const;

 private:
  const nlohmann::json& obj_;
};

// A JSON value as an int64 if it is an integer (or an integral float).
std::optional<int64_t> json_as_int(const nlohmann::json& v);
const char* json_type_name(const nlohmann::json& v);

// Request bodies nest at most this deep (arrays and objects).
inline constexpr int kMaxJsonDepth = 64;
// Scans raw JSON text (without parsing it) and refuses nesting deeper than
// max_depth: a 400 before any parse or copy, which would recurse that deep.
MaybeError check_json_depth(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace pagoda::server

#include "server/json_fields.h"

#include <cmath>

namespace pagoda::server {

using nlohmann::json;

const char* json_type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "an unsupported value";
  }
}

std::optional<int64_t> json_as_int(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) return std::nullopt;
    return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

const json* FieldReader::find(const char* key) const {
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

static ApiError type_error(const char* key, const char* want, const json& v) {
  return bad_request(std::string("'") + key + "' must be " + want + ", got " + json_type_name(v), key);
}

MaybeError FieldReader::read_bool(const char* key, bool* out) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return type_error(key, "a boolean", *v);
  *out = v->get<bool>();
  return std::nullopt;
}

MaybeError FieldReader::read_int(const char* key, int64_t lo, int64_t hi, int64_t* out) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) return type_error(key, "an integer", *v);
  auto i = json_as_int(*v);
  if (!i || *i < lo || *i > hi)
    return bad_request(std::string("'") + key + "' must be an integer in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "], got " + v->dump(),
                       key);
  *out = *i;
  return std::nullopt;
}

MaybeError FieldReader::read_int32(const char* key, int64_t lo, int64_t hi, int32_t* out) const {
  int64_t v = *out;
  if (auto e = read_int(key, lo, hi, &v)) return e;
  *out = static_cast<int32_t>(v);
  return std::nullopt;
}

MaybeError FieldReader::read_float(const char* key, double lo, double hi, float* out) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) return type_error(key, "a number", *v);
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "'%s' must be a number in [%g, %g], got %s", key, lo, hi, v->dump().c_str());
    return bad_request(buf, key);
  }
  *out = static_cast<float>(d);
  return std::nullopt;
}

MaybeError FieldReader::read_string(const char* key, std::string* out) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) return type_error(key, "a string", *v);
  *out = v->get<std::string>();
  return std::nullopt;
}

MaybeError FieldReader::expect_type(const char* key, json::value_t type) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  const bool ok = v->type() == type || (type == json::value_t::number_integer && json_as_int(*v).has_value()) ||
                  (type == json::value_t::number_float && v->is_number());
  if (!ok) return type_error(key, json_type_name(json(type)), *v);
  return std::nullopt;
}

MaybeError check_json_depth(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return bad_request("the JSON body nests deeper than " + std::to_string(max_depth) + " levels");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

}  // namespace pagoda::server

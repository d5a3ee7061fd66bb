// Metadata values: type names, predicates and constructors.
#include <utility>

#include "gguf/gguf_file.h"

namespace pagoda::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::kU8: return "u8";
    case ValueType::kI8: return "i8";
    case ValueType::kU16: return "u16";
    case ValueType::kI16: return "i16";
    case ValueType::kU32: return "u32";
    case ValueType::kI32: return "i32";
    case ValueType::kF32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kU64: return "u64";
    case ValueType::kI64: return "i64";
    case ValueType::kF64: return "f64";
  }
  return "unknown";
}

bool is_integer_type(ValueType t) {
  switch (t) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kU16:
    case ValueType::kI16:
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kBool: return true;
    default: return false;
  }
}

bool is_float_type(ValueType t) { return t == ValueType::kF32 || t == ValueType::kF64; }

bool Value::is_integer() const { return is_integer_type(type); }
bool Value::is_float() const { return is_float_type(type); }

size_t Value::array_size() const {
  if (type != ValueType::kArray) return 0;
  if (array_type == ValueType::kString) return strs.size();
  if (is_float_type(array_type)) return floats.size();
  return ints.size();
}

namespace {

Value make_signed(ValueType t, int64_t v) {
  Value out;
  out.type = t;
  out.i = v;
  out.u = static_cast<uint64_t>(v);
  return out;
}

Value make_unsigned(ValueType t, uint64_t v) {
  Value out;
  out.type = t;
  out.u = v;
  out.i = static_cast<int64_t>(v);
  return out;
}

Value make_float(ValueType t, double v) {
  Value out;
  out.type = t;
  out.f = v;
  return out;
}

Value make_array(ValueType elem) {
  Value out;
  out.type = ValueType::kArray;
  out.array_type = elem;
  return out;
}

}  // namespace

Value Value::make_u8(uint8_t v) { return make_unsigned(ValueType::kU8, v); }
Value Value::make_i8(int8_t v) { return make_signed(ValueType::kI8, v); }
Value Value::make_u16(uint16_t v) { return make_unsigned(ValueType::kU16, v); }
Value Value::make_i16(int16_t v) { return make_signed(ValueType::kI16, v); }
Value Value::make_u32(uint32_t v) { return make_unsigned(ValueType::kU32, v); }
Value Value::make_i32(int32_t v) { return make_signed(ValueType::kI32, v); }
Value Value::make_u64(uint64_t v) { return make_unsigned(ValueType::kU64, v); }
Value Value::make_i64(int64_t v) { return make_signed(ValueType::kI64, v); }
Value Value::make_f32(float v) { return make_float(ValueType::kF32, v); }
Value Value::make_f64(double v) { return make_float(ValueType::kF64, v); }

Value Value::make_bool(bool v) {
  Value out = make_unsigned(ValueType::kBool, v ? 1 : 0);
  return out;
}

Value Value::make_string(std::string v) {
  Value out;
  out.type = ValueType::kString;
  out.s = std::move(v);
  return out;
}

Value Value::make_string_array(std::vector<std::string> v) {
  Value out = make_array(ValueType::kString);
  out.strs = std::move(v);
  return out;
}

Value Value::make_f32_array(std::vector<float> v) {
  Value out = make_array(ValueType::kF32);
  out.floats.assign(v.begin(), v.end());
  return out;
}

Value Value::make_i32_array(std::vector<int32_t> v) {
  Value out = make_array(ValueType::kI32);
  out.ints.assign(v.begin(), v.end());
  return out;
}

Value Value::make_int_array(ValueType elem, std::vector<int64_t> v) {
  Value out = make_array(elem);
  out.ints = std::move(v);
  return out;
}

Value Value::make_float_array(ValueType elem, std::vector<double> v) {
  Value out = make_array(elem);
  out.floats = std::move(v);
  return out;
}

}  // namespace pagoda::gguf

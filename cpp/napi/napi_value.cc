#include "napi_value.h"

#include <cmath>

namespace dl {

bool isIntegerIn(double d, double lo, double hi) { return std::isfinite(d) && d == std::trunc(d) && d >= lo && d <= hi; }

std::string describeValue(Napi::Value v) {
  switch (v.Type()) {
    case napi_undefined: return "undefined";
    case napi_null: return "null";
    case napi_boolean: return v.As<Napi::Boolean>().Value() ? "true" : "false";
    case napi_number:  // Number -> string never throws, and prints as JS does (1.5, NaN, 1e+300)
      return v.ToString().Utf8Value();
    case napi_string: {
      std::string s = v.As<Napi::String>().Utf8Value();
      return "\"" + (s.size() > 40 ? s.substr(0, 40) + "..." : s) + "\"";
    }
    case napi_symbol: return "a symbol";
    case napi_bigint: return "a bigint";
    case napi_function: return "a function";
    default:
      if (v.IsArray()) return "an array";
      if (v.IsTypedArray() || v.IsArrayBuffer()) return "binary data";
      return "an object";
  }
}

}  // namespace dl

// Reading plain JS values at the boundary: an integer test that never casts an out-of-range double (a NaN, ±Infinity
// or 1e300 cast to int64_t is undefined behaviour), and a description of any value for error messages that cannot
// itself throw (ToString on a Symbol or a null-prototype object does).
#pragma once
#include <napi.h>
#include <string>

namespace dl {

// d is a finite integer in [lo, hi] (checked before any cast).
bool isIntegerIn(double d, double lo, double hi);

// "3", "NaN", "\"abc\"", "a symbol", "an array", "an object", ... (strings cut to 40 characters).
std::string describeValue(Napi::Value v);

}  // namespace dl

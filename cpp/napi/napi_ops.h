#pragma once
#include <napi.h>
namespace dl {
void registerOps(Napi::Env env, Napi::Object exports);  // exports.ops = { gemm, rmsnorm, ... }
}

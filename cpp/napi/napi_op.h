// Running ops from JS: an options-object reader that validates at the boundary, and an AsyncWorker that runs the
// op off the JS thread (GPU ops synchronize before the promise settles) and keeps its tensors alive meanwhile.
#pragma once
#include <napi.h>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include "common.h"
#include "napi_tensor.h"

namespace dl {

class OpArgs {
 public:
  OpArgs(const Napi::CallbackInfo& info, const char* op);

  View tensor(const char* name);     // required
  View optTensor(const char* name);  // absent/undefined/null -> empty View
  int64_t integer(const char* name, int64_t def, int64_t lo, int64_t hi);
  double number(const char* name, double def);
  std::string text(const char* name, const char* def);  // a string field, or def when absent

  const char* op;
  Device device = Device::cpu;  // of the first tensor read; all others must match
  std::vector<std::shared_ptr<Storage>> keep;

 private:
  Napi::Env env_;
  Napi::Object obj_;
  bool haveDevice_ = false;
};

// Throws dl::Error "<op>: <name> must be ..." unless v has the given rank.
void requireRank(const char* op, const char* name, const View& v, int ndim);
void requireDType(const char* op, const char* name, const View& v, DType t);
std::string shapeString(const View& v);

// Runs fn on a libuv worker thread and returns a Promise that resolves to undefined or rejects with the message.
Napi::Value runAsync(Napi::Env env, OpArgs&& args, std::function<void()> fn);

}  // namespace dl

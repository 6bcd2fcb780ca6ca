#include "napi_op.h"

#include <cmath>

#include "gpu_runtime.h"
#include "napi_value.h"

namespace dl {

OpArgs::OpArgs(const Napi::CallbackInfo& info, const char* opName) : op(opName), env_(info.Env()) {
  if (info.Length() < 1 || !info[0].IsObject()) throw Error(std::string(op) + ": expected one options object");
  obj_ = info[0].As<Napi::Object>();
}

View OpArgs::optTensor(const char* name) {
  Napi::Value v = obj_.Get(name);
  if (v.IsUndefined() || v.IsNull()) return View{};
  if (!v.IsObject() || !v.As<Napi::Object>().InstanceOf(Tensor::constructor->Value()))
    throw Error(std::string(op) + ": '" + name + "' must be a Tensor");
  Tensor* t = Napi::ObjectWrap<Tensor>::Unwrap(v.As<Napi::Object>());
  std::string what = std::string(op) + ": tensor '" + name + "'";
  keep.push_back(t->storage(what.c_str()));
  View view = t->view(what.c_str());
  if (!haveDevice_) {
    device = view.device;
    haveDevice_ = true;
  } else if (view.device != device) {
    throw Error(std::string(op) + ": tensor '" + name + "' is on " + deviceName(view.device) +
                " but the op's other tensors are on " + deviceName(device) + "; move it with copyFrom");
  }
  return view;
}

View OpArgs::tensor(const char* name) {
  View v = optTensor(name);
  if (!v) throw Error(std::string(op) + ": missing tensor '" + name + "'");
  return v;
}

int64_t OpArgs::integer(const char* name, int64_t def, int64_t lo, int64_t hi) {
  Napi::Value v = obj_.Get(name);
  if (v.IsUndefined()) return def;
  double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : NAN;
  if (!isIntegerIn(d, double(lo), double(hi)))
    throw Error(std::string(op) + ": '" + name + "' must be an integer in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "], got " + describeValue(v));
  return int64_t(d);
}

double OpArgs::number(const char* name, double def) {
  Napi::Value v = obj_.Get(name);
  if (v.IsUndefined()) return def;
  if (!v.IsNumber()) throw Error(std::string(op) + ": '" + name + "' must be a number, got " + describeValue(v));
  return v.As<Napi::Number>().DoubleValue();
}

std::string OpArgs::text(const char* name, const char* def) {
  Napi::Value v = obj_.Get(name);
  if (v.IsUndefined()) return def;
  if (!v.IsString()) throw Error(std::string(op) + ": '" + name + "' must be a string, got " + describeValue(v));
  return v.As<Napi::String>().Utf8Value();
}

std::string shapeString(const View& v) {
  std::string s = "[";
  for (int i = 0; i < v.ndim; i++) s += (i ? "," : "") + std::to_string(v.shape[i]);
  return s + "] " + dtypeName(v.dtype);
}

void requireRank(const char* op, const char* name, const View& v, int ndim) {
  if (v.ndim != ndim)
    throw Error(std::string(op) + ": '" + name + "' must have " + std::to_string(ndim) + " dimensions, got " +
                shapeString(v));
}

void requireDType(const char* op, const char* name, const View& v, DType t) {
  if (v.dtype != t)
    throw Error(std::string(op) + ": '" + name + "' must be " + dtypeName(t) + ", got " + dtypeName(v.dtype));
}

namespace {
class OpWorker : public Napi::AsyncWorker {
 public:
  OpWorker(Napi::Env env, OpArgs&& args, std::function<void()> fn)
      : Napi::AsyncWorker(env, args.op), deferred_(Napi::Promise::Deferred::New(env)), keep_(std::move(args.keep)),
        device_(args.device), op_(args.op), fn_(std::move(fn)) {}

  Napi::Promise promise() { return deferred_.Promise(); }

  void Execute() override {
    try {
      fn_();
      if (device_ == Device::cuda) gpu::synchronize();
    } catch (const std::exception& e) {
      std::string m = e.what();
      SetError(m.rfind(op_, 0) == 0 ? m : std::string(op_) + ": " + m);
    }
  }
  void OnOK() override {
    keep_.clear();
    deferred_.Resolve(Env().Undefined());
  }
  void OnError(const Napi::Error& e) override {
    keep_.clear();
    deferred_.Reject(e.Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::vector<std::shared_ptr<Storage>> keep_;
  Device device_;
  const char* op_;
  std::function<void()> fn_;
};
}  // namespace

Napi::Value runAsync(Napi::Env env, OpArgs&& args, std::function<void()> fn) {
  auto* w = new OpWorker(env, std::move(args), std::move(fn));
  Napi::Promise p = w->promise();
  w->Queue();
  return p;
}

}  // namespace dl

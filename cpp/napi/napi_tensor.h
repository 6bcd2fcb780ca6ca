// The JS Tensor: a shape, a dtype and shared Storage. Created by addon.tensor(device, dtype, shape).
#pragma once
#include <napi.h>
#include <memory>
#include <vector>
#include "common.h"
#include "storage.h"

namespace dl {

class Tensor : public Napi::ObjectWrap<Tensor> {
 public:
  static Napi::Function Init(Napi::Env env);
  static Napi::FunctionReference* constructor;
  explicit Tensor(const Napi::CallbackInfo& info);

  // The storage and a View of it; throws "<what> is disposed" after dispose().
  std::shared_ptr<Storage> storage(const char* what) const;
  View view(const char* what) const;
  const std::vector<int64_t>& shape() const { return shape_; }
  DType dtype() const { return dtype_; }

 private:
  Napi::Value Shape(const Napi::CallbackInfo& info);
  Napi::Value DTypeName(const Napi::CallbackInfo& info);
  Napi::Value DeviceName(const Napi::CallbackInfo& info);
  Napi::Value ByteLength(const Napi::CallbackInfo& info);
  Napi::Value Disposed(const Napi::CallbackInfo& info);
  Napi::Value Write(const Napi::CallbackInfo& info);
  Napi::Value Read(const Napi::CallbackInfo& info);
  Napi::Value WriteF32(const Napi::CallbackInfo& info);
  Napi::Value ReadF32(const Napi::CallbackInfo& info);
  Napi::Value CopyFrom(const Napi::CallbackInfo& info);
  Napi::Value Dispose(const Napi::CallbackInfo& info);

  std::shared_ptr<Storage> storage_;
  std::vector<int64_t> shape_;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
};

DType parseDType(Napi::Env env, const std::string& s);
Device parseDevice(Napi::Env env, const std::string& s);

}  // namespace dl

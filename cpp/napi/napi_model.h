// NativeModel: the JS handle of a dl::Model (cpp/model/model.h). One ObjectWrap, typed in ts/native/addonTypes.ts.
#pragma once
#include <napi.h>
#include <memory>
#include "model.h"

namespace dl {

class NativeModel : public Napi::ObjectWrap<NativeModel> {
 public:
  static Napi::Function Init(Napi::Env env);
  static Napi::FunctionReference* constructor;
  explicit NativeModel(const Napi::CallbackInfo& info);

 private:
  std::shared_ptr<Model> model(const char* what) const;  // throws "<what>: NativeModel is disposed"
  Napi::Value SetWeight(const Napi::CallbackInfo& info);
  Napi::Value SetQuantizedWeight(const Napi::CallbackInfo& info);
  Napi::Value MissingWeights(const Napi::CallbackInfo& info);
  Napi::Value Forward(const Napi::CallbackInfo& info);
  Napi::Value ForwardPacked(const Napi::CallbackInfo& info);
  Napi::Value forward(const Napi::CallbackInfo& info, bool packed);  // both: parse, validate, queue the step
  Napi::Value CopyPages(const Napi::CallbackInfo& info);
  Napi::Value ReadPages(const Napi::CallbackInfo& info);
  Napi::Value WritePages(const Napi::CallbackInfo& info);
  Napi::Value TakeProfile(const Napi::CallbackInfo& info);
  Napi::Value Dispose(const Napi::CallbackInfo& info);
  Napi::Value Disposed(const Napi::CallbackInfo& info);
  Napi::Value Info(const Napi::CallbackInfo& info);

  std::shared_ptr<Model> model_;  // shared with forward workers in flight
};

void registerModel(Napi::Env env, Napi::Object exports);

}  // namespace dl

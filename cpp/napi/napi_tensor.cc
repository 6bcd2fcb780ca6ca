#include "napi_tensor.h"

#include <cstring>
#include "gpu_runtime.h"
#include "napi_value.h"

namespace dl {

Napi::FunctionReference* Tensor::constructor = nullptr;

DType parseDType(Napi::Env env, const std::string& s) {
  if (s == "f32") return DType::f32;
  if (s == "bf16") return DType::bf16;
  if (s == "f16") return DType::f16;
  if (s == "i32") return DType::i32;
  if (s == "i8") return DType::i8;
  if (s == "u8") return DType::u8;
  throw Napi::TypeError::New(env, "unknown dtype '" + s + "': use one of f32, bf16, f16, i32, i8, u8");
}

Device parseDevice(Napi::Env env, const std::string& s) {
  if (s == "cpu") return Device::cpu;
  if (s == "cuda") return Device::cuda;
  throw Napi::TypeError::New(env, "unknown device '" + s + "': use \"cpu\" or \"cuda\"");
}

Napi::Function Tensor::Init(Napi::Env env) {
  Napi::Function f = DefineClass(env, "Tensor",
                                 {
                                     InstanceAccessor<&Tensor::Shape>("shape"),
                                     InstanceAccessor<&Tensor::DTypeName>("dtype"),
                                     InstanceAccessor<&Tensor::DeviceName>("device"),
                                     InstanceAccessor<&Tensor::ByteLength>("byteLength"),
                                     InstanceAccessor<&Tensor::Disposed>("disposed"),
                                     InstanceMethod<&Tensor::Write>("write"),
                                     InstanceMethod<&Tensor::Read>("read"),
                                     InstanceMethod<&Tensor::WriteF32>("writeF32"),
                                     InstanceMethod<&Tensor::ReadF32>("readF32"),
                                     InstanceMethod<&Tensor::CopyFrom>("copyFrom"),
                                     InstanceMethod<&Tensor::Dispose>("dispose"),
                                 });
  constructor = new Napi::FunctionReference(Napi::Persistent(f));
  return f;
}

// new Tensor(device: string, dtype: string, shape: number[])
Tensor::Tensor(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Tensor>(info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsString() || !info[1].IsString() || !info[2].IsArray())
    throw Napi::TypeError::New(env, "tensor(device, dtype, shape): expected (string, string, number[])");
  device_ = parseDevice(env, info[0].As<Napi::String>());
  dtype_ = parseDType(env, info[1].As<Napi::String>());
  Napi::Array s = info[2].As<Napi::Array>();
  if (s.Length() < 1 || s.Length() > 4) throw Napi::RangeError::New(env, "tensor shape must have 1 to 4 dimensions");
  // The element count is bounded as it grows, so it never overflows: a wrapped product would allocate a small
  // buffer for a shape that claims more, and every op would then read past it.
  const double maxBytes = double(int64_t(1) << 50);
  double bytes = double(dtypeSize(dtype_));
  for (uint32_t i = 0; i < s.Length(); i++) {
    Napi::Value v = s[i];
    double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
    if (!isIntegerIn(d, 1, 1e12))
      throw Napi::RangeError::New(env, "tensor shape[" + std::to_string(i) + "] must be a positive integer, got " +
                                           describeValue(v));
    shape_.push_back(int64_t(d));
    bytes *= d;
    if (bytes > maxBytes)
      throw Napi::RangeError::New(env, "tensor shape " + v.ToString().Utf8Value() + " at dimension " + std::to_string(i) +
                                           " makes the tensor larger than 2^50 bytes; check the shape");
  }
  try {
    storage_ = std::make_shared<Storage>(device_, size_t(bytes));
  } catch (const Error& e) {
    throw Napi::Error::New(env, std::string("tensor(") + deviceName(device_) + ", " + dtypeName(dtype_) + ", " +
                                    std::to_string(size_t(bytes)) + " bytes): " + e.what());
  }
  Napi::MemoryManagement::AdjustExternalMemory(env, device_ == Device::cpu ? int64_t(storage_->bytes) : 0);
}

std::shared_ptr<Storage> Tensor::storage(const char* what) const {
  if (!storage_) throw Error(std::string(what) + " is disposed");
  return storage_;
}

View Tensor::view(const char* what) const {
  auto s = storage(what);
  View v;
  v.data = s->data;
  v.dtype = dtype_;
  v.device = device_;
  v.ndim = int(shape_.size());
  for (int i = 0; i < v.ndim; i++) v.shape[i] = shape_[i];
  return v;
}

Napi::Value Tensor::Shape(const Napi::CallbackInfo& info) {
  Napi::Array a = Napi::Array::New(info.Env(), shape_.size());
  for (size_t i = 0; i < shape_.size(); i++) a[i] = Napi::Number::New(info.Env(), double(shape_[i]));
  return a;
}
Napi::Value Tensor::DTypeName(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), dtypeName(dtype_)); }
Napi::Value Tensor::DeviceName(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), deviceName(device_)); }
Napi::Value Tensor::ByteLength(const Napi::CallbackInfo& info) {
  int64_t n = 1;
  for (auto d : shape_) n *= d;
  return Napi::Number::New(info.Env(), double(n * int64_t(dtypeSize(dtype_))));
}
Napi::Value Tensor::Disposed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), !storage_); }

namespace {
struct Bytes {
  uint8_t* data;
  size_t length;
};
Bytes bytesOf(Napi::Env env, Napi::Value v, const char* what) {
  if (v.IsTypedArray()) {
    auto t = v.As<Napi::TypedArray>();
    auto ab = t.ArrayBuffer();
    return {static_cast<uint8_t*>(ab.Data()) + t.ByteOffset(), t.ByteLength()};
  }
  if (v.IsArrayBuffer()) {
    auto ab = v.As<Napi::ArrayBuffer>();
    return {static_cast<uint8_t*>(ab.Data()), ab.ByteLength()};
  }
  throw Napi::TypeError::New(env, std::string(what) + ": expected a TypedArray, Buffer or ArrayBuffer");
}
void copyIn(const Storage& s, size_t offset, const void* src, size_t n) {
  if (n == 0) return;  // an empty typed array may hand over a null pointer, which memcpy must not get
  if (s.device == Device::cpu) std::memcpy(static_cast<uint8_t*>(s.data) + offset, src, n);
  else gpu::copyHostToDevice(static_cast<uint8_t*>(s.data) + offset, src, n);
}
void copyOut(const Storage& s, void* dst) {
  if (s.bytes == 0) return;
  if (s.device == Device::cpu) std::memcpy(dst, s.data, s.bytes);
  else gpu::copyDeviceToHost(dst, s.data, s.bytes);
}
}  // namespace

// write(bytes, byteOffset = 0): raw copy of host bytes into the tensor (synchronous).
Napi::Value Tensor::Write(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    auto s = storage("tensor");
    Bytes b = bytesOf(env, info[0], "tensor.write");
    Napi::Value offset = info.Length() > 1 ? info[1] : env.Undefined();
    double off = offset.IsUndefined() ? 0 : offset.IsNumber() ? offset.As<Napi::Number>().DoubleValue() : -1;
    if (!isIntegerIn(off, 0, double(s->bytes)))
      throw Error("tensor.write: byteOffset must be an integer in [0, " + std::to_string(s->bytes) + "], got " +
                  describeValue(offset));
    if (size_t(off) + b.length > s->bytes)
      throw Error("tensor.write: " + std::to_string(b.length) + " bytes at offset " + std::to_string(size_t(off)) +
                  " do not fit in a tensor of " + std::to_string(s->bytes) + " bytes");
    copyIn(*s, size_t(off), b.data, b.length);
  } catch (const Error& e) {
    throw Napi::Error::New(env, e.what());
  }
  return env.Undefined();
}

// read(): the tensor's bytes as a new ArrayBuffer.
Napi::Value Tensor::Read(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    auto s = storage("tensor");
    Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(env, s->bytes);
    copyOut(*s, ab.Data());
    return ab;
  } catch (const Error& e) {
    throw Napi::Error::New(env, e.what());
  }
}

// writeF32(Float32Array): converts to the tensor's dtype (round to nearest even) and copies the whole tensor.
Napi::Value Tensor::WriteF32(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    auto s = storage("tensor");
    if (!info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
      throw Error("tensor.writeF32: expected a Float32Array");
    auto a = info[0].As<Napi::Float32Array>();
    size_t n = s->bytes / dtypeSize(dtype_);
    if (a.ElementLength() != n)
      throw Error("tensor.writeF32: got " + std::to_string(a.ElementLength()) + " values for a tensor of " +
                  std::to_string(n) + " elements");
    if (dtype_ == DType::i32) throw Error("tensor.writeF32: tensor dtype is i32; use write(Int32Array)");
    if (dtype_ == DType::u8) throw Error("tensor.writeF32: tensor dtype is u8; use write(Uint8Array)");
    if (dtype_ == DType::f32) {
      copyIn(*s, 0, a.Data(), s->bytes);
    } else if (dtype_ == DType::i8) {  // quantized weights: each value must be an integer in [-128, 127]
      std::vector<int8_t> tmp(n);
      for (size_t i = 0; i < n; i++) {
        const float v = a[i];
        if (!(v >= -128 && v <= 127 && v == float(int(v))))
          throw Error("tensor.writeF32: an i8 tensor takes integers in [-128, 127]; value " + std::to_string(i) + " is " + std::to_string(v));
        tmp[i] = int8_t(v);
      }
      copyIn(*s, 0, tmp.data(), s->bytes);
    } else {
      std::vector<uint16_t> tmp(n);
      for (size_t i = 0; i < n; i++) tmp[i] = dtype_ == DType::bf16 ? f32ToBf16(a[i]) : f32ToF16(a[i]);
      copyIn(*s, 0, tmp.data(), s->bytes);
    }
  } catch (const Error& e) {
    throw Napi::Error::New(env, e.what());
  }
  return env.Undefined();
}

// readF32(): the tensor converted to a Float32Array (i32 tensors convert exactly up to 2^24).
Napi::Value Tensor::ReadF32(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    auto s = storage("tensor");
    size_t n = s->bytes / dtypeSize(dtype_);
    Napi::Float32Array out = Napi::Float32Array::New(env, n);
    if (dtype_ == DType::f32) {
      copyOut(*s, out.Data());
    } else {
      std::vector<uint8_t> tmp(s->bytes);
      copyOut(*s, tmp.data());
      for (size_t i = 0; i < n; i++) {
        if (dtype_ == DType::i32) out[i] = float(reinterpret_cast<int32_t*>(tmp.data())[i]);
        else if (dtype_ == DType::i8) out[i] = float(reinterpret_cast<int8_t*>(tmp.data())[i]);
        else if (dtype_ == DType::u8) out[i] = float(tmp[i]);
        else {
          uint16_t h = reinterpret_cast<uint16_t*>(tmp.data())[i];
          out[i] = dtype_ == DType::bf16 ? bf16ToF32(h) : f16ToF32(h);
        }
      }
    }
    return out;
  } catch (const Error& e) {
    throw Napi::Error::New(env, e.what());
  }
}

// copyFrom(other): same dtype and byte length, any devices.
Napi::Value Tensor::CopyFrom(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    auto dst = storage("tensor");
    if (!info[0].IsObject() || !info[0].As<Napi::Object>().InstanceOf(constructor->Value()))
      throw Error("tensor.copyFrom: expected a Tensor");
    Tensor* o = Napi::ObjectWrap<Tensor>::Unwrap(info[0].As<Napi::Object>());
    auto src = o->storage("source tensor");
    if (o->dtype_ != dtype_ || src->bytes != dst->bytes)
      throw Error(std::string("tensor.copyFrom: source is ") + dtypeName(o->dtype_) + " of " + std::to_string(src->bytes) +
                  " bytes, destination " + dtypeName(dtype_) + " of " + std::to_string(dst->bytes) + " bytes");
    if (src->device == Device::cpu && dst->device == Device::cpu) std::memcpy(dst->data, src->data, dst->bytes);
    else if (src->device == Device::cpu) gpu::copyHostToDevice(dst->data, src->data, dst->bytes);
    else if (dst->device == Device::cpu) gpu::copyDeviceToHost(dst->data, src->data, dst->bytes);
    else {
      gpu::copyDeviceToDevice(dst->data, src->data, dst->bytes);
      gpu::synchronize();
    }
  } catch (const Error& e) {
    throw Napi::Error::New(env, e.what());
  }
  return env.Undefined();
}

// dispose(): idempotent; memory is freed once no op in flight still uses it.
Napi::Value Tensor::Dispose(const Napi::CallbackInfo& info) {
  if (storage_ && device_ == Device::cpu)
    Napi::MemoryManagement::AdjustExternalMemory(info.Env(), -int64_t(storage_->bytes));
  storage_.reset();
  return info.Env().Undefined();
}

}  // namespace dl

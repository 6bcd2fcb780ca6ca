// Module entry: Tensor, ops, devices, threads, live bytes. The whole surface is typed in ts/native/addonTypes.ts.
#include <napi.h>
#include <thread>

#include "cpu_features.h"
#include "gpu_runtime.h"
#include "napi_model.h"
#include "napi_ops.h"
#include "napi_tensor.h"
#include "napi_value.h"
#include "storage.h"
#include "threadpool.h"
#include "knobs.h"

namespace dl {
namespace {

Napi::Value NewTensor(const Napi::CallbackInfo& info) {
  std::vector<napi_value> args;
  for (size_t i = 0; i < info.Length(); i++) args.push_back(info[i]);
  return Tensor::constructor->New(args);
}

Napi::Value ListDevices(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  Napi::Object cpuInfo = Napi::Object::New(env);
  cpuInfo.Set("threads", numThreads());
  cpuInfo.Set("hardwareThreads", double(std::thread::hardware_concurrency()));
  const int limit = cgroupCpuLimit();
  cpuInfo.Set("cgroupCpuLimit", limit > 0 ? Napi::Value(Napi::Number::New(env, limit)) : env.Null());
  cpuInfo.Set("simd", simdName(simdLevel()));
  out.Set("cpu", cpuInfo);
  Napi::Object cuda = Napi::Object::New(env);
  cuda.Set("compiled", gpu::compiled());
  std::string reason;
  bool ok = false;
  try {
    ok = gpu::available(&reason);
  } catch (const std::exception& e) {
    reason = e.what();
  }
  cuda.Set("available", ok);
  if (!ok) cuda.Set("reason", reason);
  cuda.Set("runtimeVersion", gpu::runtimeVersion());
  Napi::Array list = Napi::Array::New(env);
  if (ok) {
    try {
      auto devs = gpu::devices();
      for (size_t i = 0; i < devs.size(); i++) {
        Napi::Object d = Napi::Object::New(env);
        d.Set("index", devs[i].index);
        d.Set("name", devs[i].name);
        d.Set("computeCapability", std::to_string(devs[i].major) + "." + std::to_string(devs[i].minor));
        d.Set("totalMemoryBytes", double(devs[i].totalMemoryBytes));
        d.Set("freeMemoryBytes", double(devs[i].freeMemoryBytes));
        d.Set("multiprocessors", devs[i].multiprocessors);
        list[uint32_t(i)] = d;
      }
    } catch (const std::exception& e) {
      cuda.Set("available", false);
      cuda.Set("reason", e.what());
    }
  }
  cuda.Set("wgmmaGemm", ok && gpu::wgmmaGemm());
  cuda.Set("programmaticLaunch", ok && gpu::pdlEnabled());
  cuda.Set("devices", list);
  out.Set("cuda", cuda);
  // The DL_* switches in effect (knobs.h), and any set value that was not understood (its default applies).
  Napi::Object knobs = Napi::Object::New(env);
  for (const auto& [name, value] : knob::knobReport()) knobs.Set(name, value);
  out.Set("knobs", knobs);
  const auto& invalid = knob::knobs().invalid;
  Napi::Array bad = Napi::Array::New(env, invalid.size());
  for (size_t i = 0; i < invalid.size(); i++) bad[uint32_t(i)] = invalid[i];
  out.Set("invalidKnobs", bad);
  return out;
}

Napi::Value SetThreads(const Napi::CallbackInfo& info) {
  int n = info.Length() > 0 && info[0].IsNumber() ? info[0].As<Napi::Number>().Int32Value() : 0;
  setNumThreads(n);
  return Napi::Number::New(info.Env(), numThreads());
}

Napi::Value SetGemmTile(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsNumber())
    throw Napi::TypeError::New(info.Env(), "setGemmTile(tile): tile must be a number (-1: chosen by shape)");
  return Napi::Number::New(info.Env(), gpu::setGemmTile(info[0].As<Napi::Number>().Int32Value()));
}

Napi::Value LiveBytes(const Napi::CallbackInfo& info) {
  Device d = parseDevice(info.Env(), info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : "");
  return Napi::Number::New(info.Env(), double(liveBytes(d)));
}

// stressThreadPool(regions, chunkMicros = 0, gapMicros = 0) -> Promise<{bad, workerChunks, workerSleeps, callerSleeps}>: the regions
// that went wrong, and the pool's counters over the run (threadpool.h); on a libuv thread (as model steps run), so
// that a pool that hangs leaves the event loop free for the caller's timeout.
class StressWorker : public Napi::AsyncWorker {
 public:
  StressWorker(Napi::Env env, int64_t regions, int64_t chunkMicros, int64_t gapMicros)
      : Napi::AsyncWorker(env, "stressThreadPool"), deferred_(Napi::Promise::Deferred::New(env)), regions_(regions),
        chunkMicros_(chunkMicros), gapMicros_(gapMicros) {}
  Napi::Promise promise() { return deferred_.Promise(); }
  void Execute() override {
    before_ = poolStats();
    bad_ = stressParallelFor(regions_, chunkMicros_, gapMicros_);
    after_ = poolStats();
  }
  void OnOK() override {
    Napi::Env env = Env();
    Napi::Object r = Napi::Object::New(env);
    r.Set("bad", double(bad_));
    r.Set("workerChunks", double(after_.workerChunks - before_.workerChunks));
    r.Set("workerSleeps", double(after_.workerSleeps - before_.workerSleeps));
    r.Set("callerSleeps", double(after_.callerSleeps - before_.callerSleeps));
    deferred_.Resolve(r);
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  int64_t regions_, chunkMicros_, gapMicros_, bad_ = 0;
  PoolStats before_, after_;
};

Napi::Value StressThreadPool(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber() || !isIntegerIn(info[0].As<Napi::Number>().DoubleValue(), 1, 1e8))
    throw Napi::TypeError::New(env, "stressThreadPool(regions): regions must be an integer in [1, 1e8], got " +
                                        describeValue(info.Length() < 1 ? env.Undefined() : info[0]));
  auto micros = [&](size_t i, const char* name) -> int64_t {
    if (info.Length() <= i || info[i].IsUndefined()) return 0;
    if (!info[i].IsNumber() || !isIntegerIn(info[i].As<Napi::Number>().DoubleValue(), 0, 1e4))
      throw Napi::TypeError::New(env, std::string("stressThreadPool(regions, chunkMicros, gapMicros): ") + name +
                                          " must be an integer in [0, 10000], got " + describeValue(info[i]));
    return int64_t(info[i].As<Napi::Number>().DoubleValue());
  };
  const int64_t chunkMicros = micros(1, "chunkMicros"), gapMicros = micros(2, "gapMicros");
  auto* w = new StressWorker(env, int64_t(info[0].As<Napi::Number>().DoubleValue()), chunkMicros, gapMicros);
  Napi::Promise p = w->promise();
  w->Queue();
  return p;
}

// cgroupCpuLimitFor(procSelfCgroup, mountinfo, fsRoot) -> number | null: the thread cap's cgroup reading on files a
// test lays out.
Napi::Value CgroupCpuLimitFor(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsString() || !info[1].IsString() || !info[2].IsString())
    throw Napi::TypeError::New(env, "cgroupCpuLimitFor(procSelfCgroup, mountinfo, fsRoot): three strings expected");
  const int limit = cgroupCpuLimitFrom(info[0].As<Napi::String>().Utf8Value(), info[1].As<Napi::String>().Utf8Value(),
                                       info[2].As<Napi::String>().Utf8Value());
  return limit > 0 ? Napi::Value(Napi::Number::New(env, limit)) : env.Null();
}

}  // namespace

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("Tensor", Tensor::Init(env));
  exports.Set("tensor", Napi::Function::New(env, NewTensor, "tensor"));
  exports.Set("listDevices", Napi::Function::New(env, ListDevices, "listDevices"));
  exports.Set("setThreads", Napi::Function::New(env, SetThreads, "setThreads"));
  exports.Set("setGemmTile", Napi::Function::New(env, SetGemmTile, "setGemmTile"));
  exports.Set("liveBytes", Napi::Function::New(env, LiveBytes, "liveBytes"));
  exports.Set("stressThreadPool", Napi::Function::New(env, StressThreadPool, "stressThreadPool"));
  exports.Set("cgroupCpuLimitFor", Napi::Function::New(env, CgroupCpuLimitFor, "cgroupCpuLimitFor"));
  exports.Set("cudaCompiled", Napi::Boolean::New(env, gpu::compiled()));
  registerOps(env, exports);
  registerModel(env, exports);
  return exports;
}

}  // namespace dl

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return dl::Init(env, exports); }
NODE_API_MODULE(deliberate, InitModule)

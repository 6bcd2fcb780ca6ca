// CUDA runtime glue: device discovery, memory, the backend stream. cudart is linked statically; with no driver or
// no device every entry point reports why instead of failing the import.
#include "check.cuh"
#include "device_error.cuh"
#include "gpu_runtime.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <mutex>
#include "knobs.h"

namespace dl::gpu {
namespace {
std::once_flag initOnce;
cudaStream_t theStream = nullptr;
std::string initError;

// What is missing, in a user's words: cudart says "driver version is insufficient" both when there is no driver at
// all (a machine without a GPU) and when the driver is too old; only the second is fixed by updating it.
std::string explainInitError(cudaError_t e) {
  const std::string raw = std::string(" (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
  if (e == cudaErrorNoDevice) return "no CUDA device on this machine" + raw;
  if (e == cudaErrorInsufficientDriver) {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver == nullptr) return "no NVIDIA driver installed (libcuda.so.1 not found): no GPU is usable here" + raw;
    dlclose(driver);
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    return "the NVIDIA driver is older than the CUDA " + std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) +
           " runtime this addon was built with; update the driver" + raw;
  }
  return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(e);
}

void init() {
  std::call_once(initOnce, [] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      initError = explainInitError(e);
      (void)cudaGetLastError();
      return;
    }
    if (n == 0) {
      initError = "no CUDA device visible (the driver is installed; check CUDA_VISIBLE_DEVICES)";
      return;
    }
    e = cudaStreamCreateWithFlags(&theStream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      initError = std::string("cudaStreamCreate failed: ") + cudaGetErrorString(e);
      (void)cudaGetLastError();
    }
  });
}

void require() {
  init();
  if (!initError.empty()) throw Error("CUDA backend unavailable: " + initError + "; use device \"cpu\"");
}
}  // namespace

// A thread capturing a CUDA graph (cuda/step_graph.cu) redirects its own launches to its capture stream; every
// other thread keeps enqueuing on the backend stream, so nobody else's work lands in the graph.
thread_local cudaStream_t captureStream = nullptr;
// While a SideStream runs its launches, this thread's stream(): see SideStream below.
thread_local cudaStream_t sideOverride = nullptr;

cudaStream_t stream() {
  if (sideOverride) return sideOverride;
  if (captureStream) return captureStream;
  require();
  return theStream;
}

// One side stream and its fork / join events per thread that runs steps (forwards of different models may run on
// different threads at once); created on first use, kept for the thread's life.
namespace {
struct Side {
  cudaStream_t s = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
};
thread_local Side side;
}  // namespace

void SideStream::prepare() {
  if (side.s) return;
  require();
  Side made;  // all three or none
  // The highest priority: the prefill launch's few CTAs each walk their keys alone, so they should start before the
  // decode launch's many fill the SMs.
  int least = 0, greatest = 0;
  cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&made.s, cudaStreamNonBlocking, greatest);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&made.fork, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&made.join, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    if (made.join) (void)cudaEventDestroy(made.join);
    if (made.fork) (void)cudaEventDestroy(made.fork);
    if (made.s) (void)cudaStreamDestroy(made.s);
  }
  CUDA_CHECK(e);
  side = made;
}

SideStream::SideStream(bool on) : on_(on) {
  if (!on_) return;
  cudaStream_t main = stream();
  prepare();  // a no-op after the forward's own call, made before any capture
  CUDA_CHECK(cudaEventRecord(side.fork, main));
  CUDA_CHECK(cudaStreamWaitEvent(side.s, side.fork, 0));
  main_ = main;
}

void SideStream::run(const std::function<void()>& fn) {
  if (!main_) return fn();
  struct Restore {
    ~Restore() { sideOverride = nullptr; }
  } restore;
  sideOverride = side.s;
  fn();
}

SideStream::~SideStream() {
  if (!main_) return;
  // A failure here (an invalidated capture, say) is left to the step's end: the capture reports it, or the next
  // synchronize does.
  if (cudaEventRecord(side.join, side.s) != cudaSuccess ||
      cudaStreamWaitEvent(static_cast<cudaStream_t>(main_), side.join, 0) != cudaSuccess)
    (void)cudaGetLastError();
}

void setCaptureStream(cudaStream_t s) { captureStream = s; }

// After a graph capture ended (cuda/step_graph.cu): if it ended badly with the side stream still part of it, the side
// stream is dropped (the next prepare() makes a new one) rather than left capturing.
void discardSideIfCapturing() {
  if (!side.s) return;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(side.s, &status) == cudaSuccess && status == cudaStreamCaptureStatusNone) return;
  (void)cudaGetLastError();
  (void)cudaEventDestroy(side.join);
  (void)cudaEventDestroy(side.fork);
  (void)cudaStreamDestroy(side.s);
  side = Side{};
}

bool compiled() { return true; }

bool pdlEnabled() {
  static const bool on = [] {
    if (!knob::knobs().pdl) return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
      return (void)cudaGetLastError(), false;
    return major >= 9;
  }();
  return on;
}
thread_local int pdlDepth = 0;
PdlScope::PdlScope() { pdlDepth++; }
PdlScope::~PdlScope() { pdlDepth--; }
bool pdlActive() { return pdlDepth > 0 && pdlEnabled(); }

bool wgmmaAvailable();  // cuda/gemm_args.cuh
bool wgmmaGemm() { return wgmmaAvailable(); }

void* eventRecord() {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreate(&e));
  cudaError_t r = cudaEventRecord(e, stream());
  if (r != cudaSuccess) cudaEventDestroy(e);
  CUDA_CHECK(r);
  return e;
}
float eventElapsedMs(void* from, void* to) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from), static_cast<cudaEvent_t>(to)));
  return ms;
}
void eventDestroy(void* e) noexcept {
  if (e) (void)cudaEventDestroy(static_cast<cudaEvent_t>(e));
}

bool available(std::string* reason) {
  init();
  if (!initError.empty() && reason) *reason = initError;
  return initError.empty();
}

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> out;
  if (!available(nullptr)) return out;
  int n = 0;
  CUDA_CHECK(cudaGetDeviceCount(&n));
  for (int i = 0; i < n; i++) {
    cudaDeviceProp p{};
    CUDA_CHECK(cudaGetDeviceProperties(&p, i));
    size_t freeB = 0, totalB = p.totalGlobalMem;
    int cur = 0;
    CUDA_CHECK(cudaGetDevice(&cur));
    if (cur == i) CUDA_CHECK(cudaMemGetInfo(&freeB, &totalB));
    out.push_back({i, p.name, p.major, p.minor, totalB, freeB, p.multiProcessorCount});
  }
  return out;
}

std::string runtimeVersion() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return "";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

void* malloc(size_t bytes) {
  require();
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error("CUDA out of memory: cudaMalloc of " + std::to_string(bytes) + " bytes failed (" +
                cudaGetErrorString(e) + "); free tensors or lower kvMemory");
  }
  return p;
}

void free(void* p) noexcept {
  if (p) (void)cudaFree(p);
}

void copyHostToDevice(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()));
  CUDA_CHECK(cudaStreamSynchronize(stream()));
}
void copyDeviceToHost(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()));
  CUDA_CHECK(cudaStreamSynchronize(stream()));
}
void* mallocHost(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMallocHost(&p, bytes));
  return p;
}
void freeHost(void* p) noexcept {
  if (p) cudaFreeHost(p);
}
void copyHostToDeviceAsync(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()));
}
void copyDeviceToHostAsync(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()));
}
void copyDeviceToDevice(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()));
}
void synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(stream()));
  throwIfDeviceError();  // bad indices a kernel skipped (cuda/device_error.cuh)
}

}  // namespace dl::gpu

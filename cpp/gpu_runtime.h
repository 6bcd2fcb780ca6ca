// The CUDA runtime as the rest of the addon sees it. Implemented in cuda/runtime.cu when built with CUDA, and by
// stubs (cpp/gpu_stub.cc) otherwise; either way every call reports failure by throwing dl::Error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dl::gpu {

struct DeviceInfo {
  int index;
  std::string name;
  int major, minor;  // compute capability
  size_t totalMemoryBytes, freeMemoryBytes;
  int multiprocessors;
};

bool compiled();              // built with CUDA?
bool available(std::string* reason);  // a usable device is present (reason says why not)
std::vector<DeviceInfo> devices();
std::string runtimeVersion();
// The wgmma GEMM (cuda/sm90/gemm_wgmma.cu) can run on the current device: an sm_90 GPU and a build with sm_90a code.
bool wgmmaGemm();
// Test and benchmark hook: forces the GEMM kernel config for later calls (cuda/gemm.cu: 0-5 mma.sync tiles, 6-8 wgmma;
// -1 chooses by shape, the default unless DL_GEMM_TILE is set); returns the previous setting. -1 without CUDA.
int setGemmTile(int tile);
// The splitK a fast-schedule GEMM of M rows and N columns should use when the step asks for `splitK`: 1 where its grid
// at splitK 1 already covers every SM, else `splitK` (cuda/gemm.cu). Without CUDA: `splitK`.
int fastGemmSplitK(int64_t M, int64_t N, int splitK);
// Programmatic dependent launch (cuda/pdl.cuh): DL_PDL=1 on an sm_90+ device. Only launches made inside a PdlScope
// (a model step's enqueue, cpp/model_forward.cc) use it; ops called on their own never do.
bool pdlEnabled();
struct PdlScope {
  PdlScope();
  ~PdlScope();
  PdlScope(const PdlScope&) = delete;
  PdlScope& operator=(const PdlScope&) = delete;
};
// Two launches of a step that may overlap (cuda/runtime.cu): constructed with on = true it forks a side stream off this
// thread's current stream (the side waits for everything enqueued so far); run(fn) enqueues fn's launches on the side
// (on the current stream when off); the destructor joins (the current stream waits for the side's work). Works
// eagerly and inside a graph capture (the side joins the capture through the fork). Never throws from the destructor.
// prepare() creates this thread's side stream and events; call it outside any capture before the first use.
class SideStream {
 public:
  static void prepare();
  explicit SideStream(bool on);
  ~SideStream();
  void run(const std::function<void()>& fn);
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

 private:
  bool on_;
  void* main_ = nullptr;  // the stream forked from (a cudaStream_t), joined back in the destructor
};
// Timing events on the backend stream (StepProfile): record one, milliseconds between two recorded ones (after a
// synchronize), destroy.
void* eventRecord();
float eventElapsedMs(void* from, void* to);
void eventDestroy(void* event) noexcept;

void* malloc(size_t bytes);
void free(void* p) noexcept;
void copyHostToDevice(void* dst, const void* src, size_t bytes);
void copyDeviceToHost(void* dst, const void* src, size_t bytes);
void copyDeviceToDevice(void* dst, const void* src, size_t bytes);
void synchronize();  // waits for the backend stream; throws on any asynchronous error
// Page-locked host memory (KV offloading's staging) and copies queued on the backend stream without a wait: the
// caller synchronizes once after a batch of them.
void* mallocHost(size_t bytes);
void freeHost(void* p) noexcept;
void copyHostToDeviceAsync(void* dst, const void* src, size_t bytes);
void copyDeviceToHostAsync(void* dst, const void* src, size_t bytes);

// CUDA graphs of whole forward steps, keyed by everything a step's launches bake in (shapes, metadata offsets, buffer
// addresses). A key's first step runs eagerly (it grows scratch and workspace and configures kernels); the second is
// captured and replayed on the backend stream, as are later ones: one launch instead of ~15 per layer.
class StepGraphs {
 public:
  StepGraphs();
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;
  // Runs `enqueue` (which must only enqueue work on gpu stream(): no host copies or syncs) through the graph of
  // `key` and returns true, or returns false without running anything: the caller then runs it eagerly.
  bool run(std::vector<int64_t> key, const std::function<void()>& enqueue);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace dl::gpu

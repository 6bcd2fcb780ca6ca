// CPU-only builds: the GPU backend exists but reports itself unavailable with the reason.
#ifndef DELIBERATE_CUDA
#include "gpu_runtime.h"
#include "kernels.h"

namespace dl::gpu {
namespace {
[[noreturn]] void unavailable() {
  throw Error("CUDA backend unavailable: this addon was built without CUDA (nvcc was not found at install time); "
              "install the CUDA toolkit and run `npm run build:addon`, or use device \"cpu\"");
}
}  // namespace
bool compiled() { return false; }
bool available(std::string* reason) {
  if (reason) *reason = "built without CUDA (nvcc not found at install time)";
  return false;
}
std::vector<DeviceInfo> devices() { return {}; }
std::string runtimeVersion() { return ""; }
bool wgmmaGemm() { return false; }
int setGemmTile(int) { return -1; }
int fastGemmSplitK(int64_t, int64_t, int splitK) { return splitK; }
void* eventRecord() { unavailable(); }
float eventElapsedMs(void*, void*) { unavailable(); }
void eventDestroy(void*) noexcept {}
void* malloc(size_t) { unavailable(); }
void free(void*) noexcept {}
void copyHostToDevice(void*, const void*, size_t) { unavailable(); }
void copyDeviceToHost(void*, const void*, size_t) { unavailable(); }
void copyDeviceToDevice(void*, const void*, size_t) { unavailable(); }
void synchronize() { unavailable(); }
void* mallocHost(size_t) { unavailable(); }
void freeHost(void*) noexcept {}
void copyHostToDeviceAsync(void*, const void*, size_t) { unavailable(); }
void copyDeviceToHostAsync(void*, const void*, size_t) { unavailable(); }
bool pdlEnabled() { return false; }
PdlScope::PdlScope() {}
PdlScope::~PdlScope() {}
void SideStream::prepare() { unavailable(); }
SideStream::SideStream(bool on) : on_(on) {
  if (on_) unavailable();
}
SideStream::~SideStream() {}
void SideStream::run(const std::function<void()>& fn) { fn(); }
struct StepGraphs::Impl {};
StepGraphs::StepGraphs() : impl_(nullptr) {}
StepGraphs::~StepGraphs() = default;
bool StepGraphs::run(std::vector<int64_t>, const std::function<void()>&) { return false; }

void gemm(const View&, const View&, const View&, const View&, int) { unavailable(); }
void gemmBlocks(const View&, const View&, const View&, const View&, int, int64_t, int64_t, int64_t, int64_t) { unavailable(); }
void rmsnorm(const View&, const View&, const View&, const View&, float) { unavailable(); }
void rope(const View&, const View&, const View&, const View&) { unavailable(); }
void siluMul(const View&, const View&) { unavailable(); }
void embedding(const View&, const View&, const View&) { unavailable(); }
void add(const View&, const View&, const View&) { unavailable(); }
void relu(const View&, const View&) { unavailable(); }
void kvWrite(const View&, const View&, const View&, const View&, const View&) { unavailable(); }
void ropeKvWrite(const View&, const View&, const View&, const View&, const View&, const View&, const View&, const View&) {
  unavailable();
}
void pageCopy(const View&, const View&, const View&, const View&) { unavailable(); }
void attentionDecode(const View&, const PagedKV&, const View&, float, int) { unavailable(); }
void attentionPrefill(const View&, const View&, const PagedKV&, const View&, float, int) { unavailable(); }
void maskLogits(const View&, const View&, const View&) { unavailable(); }
void sample(const SampleArgs&) { unavailable(); }
void moe(const MoeArgs&) { unavailable(); }
}  // namespace dl::gpu
#endif

#include "threadpool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <immintrin.h>

namespace dl {
namespace {

// A model step is hundreds of parallel regions microseconds apart: a thread that finds nothing to do first spins
// this many pause iterations (~25 us on the Zen 4 measured here) before it sleeps on the condition variable, so that
// consecutive regions neither pay a futex wake-up nor a context switch each (measured: those cost ~7% of the CPU
// time of a batch-16 SmolLM-135M decode step on 2 threads).
constexpr int kSpins = 1 << 10;

class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop(); }

  int size() const { return int(workers_.size()) + 1; }

  void resize(int n) {
    std::lock_guard<std::mutex> call(callMu_);  // never while a parallel region runs
    stop();
    stopping_ = false;
    for (int i = 0; i < n - 1; i++) workers_.emplace_back([this, i] { loop(i + 1); });
  }

  void run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    int threads = size();
    int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(threads, (n + grain - 1) / std::max<int64_t>(1, grain)));
    if (chunks == 1 || threads == 1) {
      fn(0, n);
      return;
    }
    std::unique_lock<std::mutex> call(callMu_);  // one parallel region at a time (calls come from AsyncWorkers)
    {
      std::lock_guard<std::mutex> lk(mu_);
      // A worker may still be in work() from the previous region (it decremented the last pending chunk and is
      // about to fetch_add next_ once more). next_ stays closed (kClosed) until the region is fully described, and
      // opening it (next_ = 0) is the last store: a chunk can only be claimed once pending_, fn_, n_ and chunks_
      // belong to this region. (Resetting next_ before pending_ let such a worker run this region's chunks and
      // decrement the previous region's pending_ of 0; the store of `chunks` then left pending_ > 0 for ever and
      // the caller slept on done_ with every chunk done: the serving bench's hang at 0% CPU.)
      fn_ = &fn;
      n_ = n;
      chunks_.store(chunks, std::memory_order_relaxed);
      pending_.store(chunks);
      error_ = nullptr;
      next_.store(0);
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    work();
    for (int i = 0; i < kSpins && pending_.load(std::memory_order_acquire) != 0; i++) _mm_pause();
    std::unique_lock<std::mutex> lk(mu_);
    done_.wait(lk, [this] { return pending_.load() == 0; });
    next_.store(kClosed);  // late claims (a worker still looping in work()) fail until the next region opens
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work() {
    for (;;) {
      int64_t c = next_.fetch_add(1);
      const int64_t k = chunks_.load(std::memory_order_relaxed);
      if (c >= k) return;
      int64_t b = n_ * c / k, e = n_ * (c + 1) / k;
      try {
        (*fn_)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_) error_ = std::current_exception();
      }
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lk(mu_);  // the caller checks pending_ under mu_ before it sleeps
        done_.notify_all();
      }
    }
  }

  void loop(int) {
    uint64_t seen = 0;
    for (;;) {
      for (int i = 0; i < kSpins && generation_.load(std::memory_order_acquire) == seen; i++) _mm_pause();
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stopping_ || (generation_ != seen && fn_ != nullptr); });
        if (stopping_) return;
        seen = generation_;
      }
      work();
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  std::vector<std::thread> workers_;
  std::mutex mu_, callMu_;
  std::condition_variable cv_, done_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> chunks_{0};
  // Next chunk to claim; kClosed between regions, so no claim succeeds while a region is being set up.
  static constexpr int64_t kClosed = int64_t(1) << 62;
  std::atomic<int64_t> next_{kClosed}, pending_{0};
  std::atomic<uint64_t> generation_{0};
  bool stopping_ = false;
  std::exception_ptr error_;
};

int defaultThreads() {
  unsigned h = std::thread::hardware_concurrency();
  return h == 0 ? 1 : int(h);
}

Pool& pool() {
  static Pool p(defaultThreads());
  return p;
}
std::mutex resizeMu;

}  // namespace

int numThreads() { return pool().size(); }

void setNumThreads(int n) {
  std::lock_guard<std::mutex> lk(resizeMu);
  pool().resize(n <= 0 ? defaultThreads() : n);
}

void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  pool().run(n, grain, fn);
}

}  // namespace dl

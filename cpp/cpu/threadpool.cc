#include "threadpool.h"

#include "knobs.h"

#ifdef __linux__
#include <sched.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <immintrin.h>

namespace dl {
namespace {

// A model step is hundreds of parallel regions microseconds apart, and engine steps follow each other after ~0.1-0.3
// ms of host work: an idle worker polls for the next region for DL_POOL_SPIN_US (knobs.h; default 500 us) before it
// sleeps on the condition variable, so that neither the next region nor the next step pays a futex wake-up and a
// context switch (tens of microseconds on a VM, and the region waits for its slowest thread). Measured on the 2-core
// Zen 4 VM, tiny reasoner, 3000 forwards a run, 6 alternating runs, against the ~26 us spin before: one row p50
// 0.16 against 0.22 ms a step, p90 0.23 against 0.38; 16 rows p50 0.65 against 0.69, p90 0.87 against 1.18
// (bench/RESULTS-throughput.md, 2026-11-27). Two waits poll at most kShortSpin: the caller's for the workers' chunks
// of its region (a worker that is running finishes within a region's imbalance; one that is not needs the core the
// poller holds: polling 500 us there measured no faster), and every wait of a pool with more threads than the CPUs it
// may run on.
int defaultThreads();

constexpr auto kShortSpin = std::chrono::microseconds(25);

// Polls done() until it holds or `budget` has passed; returns done().
template <class Done> bool spinUntil(Done done, std::chrono::nanoseconds budget) {
  if (done()) return true;
  const auto until = std::chrono::steady_clock::now() + budget;
  while (std::chrono::steady_clock::now() < until)
    for (int i = 0; i < 64; i++) {
      if (done()) return true;
      _mm_pause();
    }
  return done();
}

class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop(); }

  // Read without the call lock (a region's chunk count; setThreads may run beside a forward): any count is safe,
  // since the caller and the workers claim whatever chunks a region has.
  int size() const { return threads_.load(std::memory_order_relaxed); }

  void resize(int n) {
    std::lock_guard<std::mutex> call(callMu_);  // never while a parallel region runs
    stop();
    stopping_.store(false);
    spin_ = std::chrono::microseconds(knob::knobs().poolSpinUs);
    if (n > defaultThreads()) spin_ = std::min<std::chrono::nanoseconds>(spin_, kShortSpin);
    for (int i = 0; i < n - 1; i++) workers_.emplace_back([this, i] { loop(i + 1); });
    threads_.store(n, std::memory_order_relaxed);
  }

  PoolStats stats() const { return {workerChunks_.load(), workerSleeps_.load(), callerSleeps_.load()}; }

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
      // about to claim once more). A claim reads the chunk index and the region's chunk count from one atomic
      // (next_), so it can only succeed for a chunk of the region that is open; opening it is the last store, after
      // pending_, fn_ and n_ belong to this region. (Two earlier versions let such a worker run a chunk twice: one
      // reset next_ before pending_, the other read the chunk count separately, so a claim that had failed in the
      // old region (index >= its count) could pass against the next region's larger count. Either way a chunk ran
      // twice, pending_ went wrong, and the caller hung or returned while a chunk still ran: bench:serving hung at
      // 0% CPU; test/kernels/threadpool.test.ts reproduces both on more threads than cores.)
      fn_ = &fn;
      n_ = n;
      pending_.store(chunks);
      error_ = nullptr;
      next_.store(uint64_t(chunks) << 32);
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    work(false);
    spinUntil([this] { return pending_.load(std::memory_order_acquire) == 0; }, std::min<std::chrono::nanoseconds>(spin_, kShortSpin));
    std::unique_lock<std::mutex> lk(mu_);
    if (pending_.load() != 0) {
      callerSleeps_.fetch_add(1, std::memory_order_relaxed);
      done_.wait(lk, [this] { return pending_.load() == 0; });
    }
    next_.store(0);  // zero chunks: late claims (a worker still looping in work()) fail until the next region opens
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work(bool worker) {
    for (;;) {
      const uint64_t claim = next_.fetch_add(1);
      const int64_t k = int64_t(claim >> 32), c = int64_t(claim & 0xffffffffu);
      if (c >= k) return;
      if (worker) workerChunks_.fetch_add(1, std::memory_order_relaxed);
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
      spinUntil([&] { return generation_.load(std::memory_order_acquire) != seen || stopping_.load(std::memory_order_relaxed); }, spin_);
      {
        std::unique_lock<std::mutex> lk(mu_);
        if (!stopping_ && generation_ != seen && fn_ == nullptr) {  // a region opened and closed while this thread
          seen = generation_;                                        // polled: nothing to do there, poll on
          continue;
        }
        auto ready = [&] { return stopping_ || (generation_ != seen && fn_ != nullptr); };
        if (!ready()) {
          workerSleeps_.fetch_add(1, std::memory_order_relaxed);
          cv_.wait(lk, ready);
        }
        if (stopping_) return;
        seen = generation_;
      }
      work(true);
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_.store(true);
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
  // The open region's chunk count (high 32 bits) and next chunk to claim (low 32 bits); 0 between regions, so no
  // claim succeeds while a region is being set up. (Late failed claims only raise the low half.)
  std::atomic<uint64_t> next_{0};
  std::atomic<int64_t> pending_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};  // written under mu_; read by polling workers without it
  std::atomic<int> threads_{1};
  std::chrono::nanoseconds spin_{0};  // how long an idle thread polls before it sleeps (set before workers start)
  std::atomic<uint64_t> workerChunks_{0}, workerSleeps_{0}, callerSleeps_{0};  // since the process started
  std::exception_ptr error_;
};

// The smallest CPU bandwidth limit (quota / period, in CPUs) along `path` and its ancestors under a cgroup mount, read
// by `limitAt(dir)` (0: none there); 0 when there is none.
template <class LimitAt> double smallestLimit(const std::string& mount, std::string path, LimitAt limitAt) {
  double best = 0;
  for (;;) {
    const double l = limitAt(mount + path);
    if (l > 0 && (best == 0 || l < best)) best = l;
    const size_t slash = path.find_last_of('/');
    if (path.empty() || path == "/" || slash == std::string::npos) return best;
    path = slash == 0 ? "/" : path.substr(0, slash);
  }
}

// Two numbers of a cgroup file ("quota period" of v2's cpu.max; v1's cpu.cfs_quota_us, cpu.cfs_period_us): quota /
// period, or 0 where the file is missing or says "max" / -1 (no limit).
double ratio(const std::string& quotaFile, const std::string& periodFile) {
  std::ifstream q(quotaFile);
  std::string quota, period;
  if (!(q >> quota)) return 0;
  if (quotaFile == periodFile) q >> period;
  else std::ifstream(periodFile) >> period;
  char* end = nullptr;
  const double a = std::strtod(quota.c_str(), &end), b = std::strtod(period.c_str(), nullptr);
  return end != quota.c_str() && a > 0 && b > 0 ? a / b : 0;
}

}  // namespace

int cgroupCpuLimitFrom(const std::string& procSelfCgroup, const std::string& fsRoot) {
  // /proc/self/cgroup: "0::path" (v2), "id:controller,controller:path" (v1). A container's own cgroup is its mount's
  // root where the runtime gives it a cgroup namespace (or bind-mounts it there): the walk up reaches it either way.
  std::istringstream f(procSelfCgroup);
  std::string line;
  double best = 0;
  auto keep = [&](double l) {
    if (l > 0 && (best == 0 || l < best)) best = l;
  };
  const std::string cg = fsRoot + "/sys/fs/cgroup";
  while (std::getline(f, line)) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      for (const std::string& mount : {cg, cg + "/unified"})
        keep(smallestLimit(mount, path, [](const std::string& dir) { return ratio(dir + "/cpu.max", dir + "/cpu.max"); }));
    } else if (("," + controllers + ",").find(",cpu,") != std::string::npos) {
      for (const std::string& mount : {cg + "/" + controllers, cg + "/cpu"})
        keep(smallestLimit(mount, path, [](const std::string& dir) { return ratio(dir + "/cpu.cfs_quota_us", dir + "/cpu.cfs_period_us"); }));
    }
  }
  return best > 0 ? std::max(1, int(std::ceil(best - 1e-9))) : 0;
}

int cgroupCpuLimit() {
#ifdef __linux__
  std::ifstream f("/proc/self/cgroup");
  std::stringstream text;
  text << f.rdbuf();
  return cgroupCpuLimitFrom(text.str(), "");
#else
  return 0;
#endif
}

namespace {

// One thread per CPU this process may run on: the affinity mask (taskset, cpusets) where Linux gives one, so a
// process pinned to one core of many does not spin two workers on it, else every hardware thread; and no more than
// its cgroup's CPU limit (a container started with --cpus 2 on a 16-core host: 2 threads, not 16 that poll between
// regions and are throttled).
int defaultThreads() {
  int n = 0;
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) n = CPU_COUNT(&set);
#endif
  if (n == 0) {
    const unsigned h = std::thread::hardware_concurrency();
    n = h == 0 ? 1 : int(h);
  }
  const int limit = cgroupCpuLimit();
  return limit > 0 ? std::min(n, limit) : n;
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

PoolStats poolStats() { return pool().stats(); }

int64_t stressParallelFor(int64_t regions, int64_t chunkMicros) {
  const int64_t maxN = 4 * int64_t(numThreads());
  std::vector<std::atomic<int>> hits(size_t(maxN + 1));
  int64_t bad = 0;
  for (int64_t r = 0; r < regions; r++) {
    const int64_t n = 1 + r % maxN;  // 1 .. 4 x threads indices, grain 1: 1 .. threads chunks
    for (int64_t i = 0; i <= n; i++) hits[size_t(i)].store(0, std::memory_order_relaxed);
    parallelFor(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) hits[size_t(i)].fetch_add(1, std::memory_order_relaxed);
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(chunkMicros);
      while (std::chrono::steady_clock::now() < until) _mm_pause();
    });
    bool ok = hits[size_t(n)].load() == 0;
    for (int64_t i = 0; i < n; i++) ok = ok && hits[size_t(i)].load() == 1;
    bad += ok ? 0 : 1;
  }
  return bad;
}

}  // namespace dl

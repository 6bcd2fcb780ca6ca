#include "threadpool.h"

#include "knobs.h"

#ifdef __linux__
#include <sched.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
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
// (bench/RESULTS-throughput.md). Two waits poll at most kShortSpin: the caller's for the workers' chunks
// of its region (a worker that is running finishes within a region's imbalance; one that is not needs the core the
// poller holds: polling 500 us there measured no faster), and every wait of a pool with more threads than the CPUs
// available to it (availableCpus: its affinity mask, at most its cgroup's CPU limit).
int availableCpus();

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
    if (n > availableCpus()) spin_ = std::min<std::chrono::nanoseconds>(spin_, kShortSpin);
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

// Two numbers of a cgroup file ("quota period" of v2's cpu.max; v1's cpu.cfs_quota_us, cpu.cfs_period_us): quota /
// period in CPUs, or 0 where the file is missing or says "max" / -1 (no limit) or holds no finite positive numbers.
double ratio(const std::string& quotaFile, const std::string& periodFile) {
  std::ifstream q(quotaFile);
  std::string quota, period;
  if (!(q >> quota)) return 0;
  if (quotaFile == periodFile) q >> period;
  else std::ifstream(periodFile) >> period;
  char* end = nullptr;
  const double a = std::strtod(quota.c_str(), &end), b = std::strtod(period.c_str(), nullptr);
  return end != quota.c_str() && std::isfinite(a) && std::isfinite(b) && a > 0 && b > 0 ? a / b : 0;
}

// mountinfo's octal escapes (\040 for a space, ...) decoded.
std::string unescapeMount(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    auto digit = [&](size_t j) { return std::isdigit(static_cast<unsigned char>(s[j])) != 0; };
    if (s[i] == '\\' && i + 3 < s.size() && digit(i + 1) && digit(i + 2) && digit(i + 3)) {
      out += char(std::strtol(s.substr(i + 1, 3).c_str(), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// `path` relative to `root` ("" when equal), component-wise; false when it is not under root or climbs ("..": a
// process outside its cgroup namespace's root, whose limits this mount does not show).
bool relativeTo(const std::string& path, const std::string& root, std::string& rel) {
  if (path.empty() || path[0] != '/' || (path + "/").find("/../") != std::string::npos) return false;
  if (root == "/") return rel = path == "/" ? "" : path, true;
  if (path == root) return rel = "", true;
  if (path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '/') return rel = path.substr(root.size()), true;
  return false;
}

}  // namespace

int cgroupCpuLimitFrom(const std::string& procSelfCgroup, const std::string& mountinfo, const std::string& fsRoot) {
  // /proc/self/cgroup: "0::path" (v2), "id:controller,controller:path" (v1), paths as this process's cgroup
  // namespace names them.
  std::string v2Path, v1Path;
  {
    std::istringstream f(procSelfCgroup);
    std::string line;
    while (std::getline(f, line)) {
      const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
      if (b == std::string::npos) continue;
      const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
      if (line.compare(0, a, "0") == 0 && controllers.empty()) v2Path = path;
      else if (("," + controllers + ",").find(",cpu,") != std::string::npos) v1Path = path;
    }
  }
  // /proc/self/mountinfo: "id parent dev root mountpoint options [optional...] - fstype source superoptions". A
  // cgroup mount shows the cgroup its root is and where it is mounted: only a mount whose root holds this
  // process's cgroup shows its limits, walked from the process's cgroup up to the mount's root (a container
  // usually sees its own cgroup as the root of its mount; a host's bind-mounted tree or a sibling's is skipped).
  double best = 0;
  std::istringstream f(mountinfo);
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream fields(line);
    std::vector<std::string> v;
    for (std::string w; fields >> w;) v.push_back(w);
    const auto dash = std::find(v.begin(), v.end(), "-");
    if (v.size() < 5 || dash == v.end() || v.end() - dash < 4) continue;
    const std::string fstype = dash[1], superOptions = "," + dash[3] + ",";
    const bool v2 = fstype == "cgroup2", v1 = fstype == "cgroup" && superOptions.find(",cpu,") != std::string::npos;
    std::string rel;
    if (!(v2 || v1) || !relativeTo(v2 ? v2Path : v1Path, unescapeMount(v[3]), rel)) continue;
    const std::string point = fsRoot + unescapeMount(v[4]);
    for (std::string dir = point + rel;;) {
      const double l = v2 ? ratio(dir + "/cpu.max", dir + "/cpu.max") : ratio(dir + "/cpu.cfs_quota_us", dir + "/cpu.cfs_period_us");
      if (l > 0 && (best == 0 || l < best)) best = l;
      if (dir.size() <= point.size()) break;
      dir = dir.substr(0, dir.find_last_of('/'));
    }
  }
  // Whole CPUs, rounded up (as Go's runtime does); a limit past any real machine is none.
  return best > 0 && best < 1e6 ? std::max(1, int(std::ceil(best - 1e-9))) : 0;
}

int cgroupCpuLimit() {
#ifdef __linux__
  auto read = [](const char* file) {
    std::ifstream f(file);
    std::stringstream text;
    text << f.rdbuf();
    return text.str();
  };
  return cgroupCpuLimitFrom(read("/proc/self/cgroup"), read("/proc/self/mountinfo"), "");
#else
  return 0;
#endif
}

namespace {

// The CPUs this process may use: those of its affinity mask (taskset, cpusets) where Linux gives one, else every
// hardware thread; at most its cgroup's CPU limit (a container started with --cpus 2 on a 16-core host: 2, not 16
// threads that poll between regions and are throttled).
int availableCpus() {
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

// The pool's size unless setThreads says otherwise: DL_CPU_THREADS where set (knobs.h), else one thread per
// available CPU.
int defaultThreads() {
  const int forced = knob::knobs().cpuThreads;
  return forced > 0 ? forced : availableCpus();
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

// Busy (not asleep) for `micros`: a chunk's work, or a caller's serial work between regions.
static void busyFor(int64_t micros) { spinUntil([] { return false; }, std::chrono::microseconds(micros)); }

int64_t stressParallelFor(int64_t regions, int64_t chunkMicros, int64_t gapMicros) {
  const int64_t maxN = 4 * int64_t(numThreads());
  std::vector<std::atomic<int>> hits(size_t(maxN + 1));
  int64_t bad = 0;
  for (int64_t r = 0; r < regions; r++) {
    const int64_t n = 1 + r % maxN;  // 1 .. 4 x threads indices, grain 1: 1 .. threads chunks
    for (int64_t i = 0; i <= n; i++) hits[size_t(i)].store(0, std::memory_order_relaxed);
    parallelFor(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) hits[size_t(i)].fetch_add(1, std::memory_order_relaxed);
      busyFor(chunkMicros);
    });
    if (gapMicros > 0) busyFor(gapMicros);
    bool ok = hits[size_t(n)].load() == 0;
    for (int64_t i = 0; i < n; i++) ok = ok && hits[size_t(i)].load() == 1;
    bad += ok ? 0 : 1;
  }
  return bad;
}

}  // namespace dl

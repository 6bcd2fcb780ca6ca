// A fixed pool of worker threads for CPU kernels. Work is split by output (rows, columns, heads), never inside
// a reduction, so a result never depends on the thread count.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace dl {

int numThreads();
// This process's cgroup CPU limit (v2 cpu.max or v1 CFS quota, the smallest along its cgroup's ancestors that its
// cgroup mounts show) in whole CPUs rounded up; 0 when there is none. The default thread count never exceeds it.
int cgroupCpuLimit();
// The same from /proc/self/cgroup and /proc/self/mountinfo texts, reading the cgroup files under `fsRoot` ("" = /):
// tests.
int cgroupCpuLimitFrom(const std::string& procSelfCgroup, const std::string& mountinfo, const std::string& fsRoot);
void setNumThreads(int n);  // n <= 0: the default (DL_CPU_THREADS, else the CPUs of the affinity mask, at most the cgroup CPU limit)

// Runs fn(begin, end) over [0, n) cut into contiguous chunks of at least `grain`, one or more per thread; returns
// when all are done. Exceptions thrown by fn are rethrown on the calling thread (the first one wins).
void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Counts since the process started: chunks run by worker threads (not callers), times a worker slept on its
// condition variable waiting for a region, times a caller slept waiting for its region's other chunks.
struct PoolStats {
  uint64_t workerChunks = 0, workerSleeps = 0, callerSleeps = 0;
};
PoolStats poolStats();

// Runs `regions` small parallel regions (chunk counts cycling from 1 to the pool size), each chunk busy for
// `chunkMicros` (0: only its bookkeeping) and the caller busy `gapMicros` between regions (a step's serial work, 0:
// back to back), checking that every index of every region ran exactly once; returns
// the number of regions in which one did not (0 when the pool is sound). A broken hand-over between regions shows as
// a non-zero count or as a call that never returns: the regression test of the pool
// (test/kernels/threadpool.test.ts) runs it on more threads than cores, and with chunks long enough that workers run
// them and callers wait, polling or asleep (DL_POOL_SPIN_US).
int64_t stressParallelFor(int64_t regions, int64_t chunkMicros = 0, int64_t gapMicros = 0);

}  // namespace dl

// A fixed pool of worker threads for CPU kernels. Work is split by output (rows, columns, heads), never inside
// a reduction, so a result never depends on the thread count.
#pragma once
#include <cstdint>
#include <functional>

namespace dl {

int numThreads();
void setNumThreads(int n);  // n <= 0: hardware concurrency

// Runs fn(begin, end) over [0, n) cut into contiguous chunks of at least `grain`, one or more per thread; returns
// when all are done. Exceptions thrown by fn are rethrown on the calling thread (the first one wins).
void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Runs `regions` small parallel regions back to back (chunk counts cycling from 1 to the pool size), checking that
// every index of every region ran exactly once; returns the number of regions in which one did not (0 when the pool
// is sound). A broken hand-over between regions shows as a non-zero count or as a call that never returns: the
// regression test of the pool (test/kernels/threadpool.test.ts) runs it on more threads than cores.
int64_t stressParallelFor(int64_t regions);

}  // namespace dl

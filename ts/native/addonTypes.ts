// The whole native surface, typed in one place (mirrors cpp/addon.cc, cpp/napi_tensor.cc, cpp/napi_ops.cc).
// Every op takes one options object and returns a Promise that settles when the work is done (AsyncWorker: the
// event loop keeps running meanwhile); bad input rejects with an Error naming the op, the field and the problem.

export type DType = "f32" | "bf16" | "f16" | "i32";
export type DeviceKind = "cpu" | "cuda";

export interface NativeTensor {
  readonly shape: number[];
  readonly dtype: DType;
  readonly device: DeviceKind;
  readonly byteLength: number;
  readonly disposed: boolean;
  /** Raw copy of host bytes into the tensor at byteOffset (synchronous). */
  write(bytes: ArrayBufferView | ArrayBuffer, byteOffset?: number): void;
  /** The tensor's bytes (synchronous). */
  read(): ArrayBuffer;
  /** Whole tensor from f32 values, converted to the tensor's dtype (round to nearest even). */
  writeF32(values: Float32Array): void;
  /** Whole tensor converted to f32. */
  readF32(): Float32Array;
  /** Copies another tensor of the same dtype and byte length, across devices if need be. */
  copyFrom(other: NativeTensor): void;
  /** Idempotent; memory is released once no op in flight still uses it. */
  dispose(): void;
}

/** Paged KV cache of one layer, flashinfer CSR form: caches [numPages, pageSize, Hk, D]; indptr [B+1]; indices; lastPageLen [B]. */
export interface PagedKVArgs {
  kCache: NativeTensor;
  vCache: NativeTensor;
  indptr: NativeTensor;
  indices: NativeTensor;
  lastPageLen: NativeTensor;
}

export interface NativeOps {
  /** y[M,N] = x[M,K] · w[N,K]^T (+ bias[N]); K cut into splitK partitions summed in a fixed order. */
  gemm(a: { x: NativeTensor; w: NativeTensor; bias?: NativeTensor; y: NativeTensor; splitK?: number }): Promise<void>;
  /** residual += x (when given), out = rmsnorm(residual or x) * weight. */
  rmsnorm(a: { x: NativeTensor; residual?: NativeTensor; weight: NativeTensor; out: NativeTensor; eps?: number }): Promise<void>;
  /** In-place rotary embedding, HF rotate-half; q [T,Hq,D], k [T,Hk,D], positions i32 [T], invFreq f32 [D/2]. */
  rope(a: { q: NativeTensor; k: NativeTensor; positions: NativeTensor; invFreq: NativeTensor }): Promise<void>;
  /** out[M,I] = silu(gateUp[:, :I]) * gateUp[:, I:]. */
  siluMul(a: { gateUp: NativeTensor; out: NativeTensor }): Promise<void>;
  /** out[T,C] = table[ids[T]]. */
  embedding(a: { ids: NativeTensor; table: NativeTensor; out: NativeTensor }): Promise<void>;
  add(a: { a: NativeTensor; b: NativeTensor; out: NativeTensor }): Promise<void>;
  /** kCache/vCache[slots[t]] = k/v[t]; slot = page * pageSize + offset. */
  kvWrite(a: { k: NativeTensor; v: NativeTensor; kCache: NativeTensor; vCache: NativeTensor; slots: NativeTensor }): Promise<void>;
  /** Whole pages src[i] -> dst[i] in both caches. */
  pageCopy(a: { kCache: NativeTensor; vCache: NativeTensor; src: NativeTensor; dst: NativeTensor }): Promise<void>;
  /** One query per sequence, split-KV with kvSplits partitions merged by log-sum-exp. */
  attentionDecode(a: PagedKVArgs & { q: NativeTensor; out: NativeTensor; scale?: number; kvSplits?: number }): Promise<void>;
  /** T queries per sequence (qIndptr [B+1]), causal over cached prefix + new tokens. */
  attentionPrefill(a: PagedKVArgs & { q: NativeTensor; qIndptr: NativeTensor; out: NativeTensor; scale?: number }): Promise<void>;
  /** Greedy (temperature 0) or Gumbel-max sampling keyed by (seed, position, token id); raw log-softmax logprobs. */
  sample(a: {
    logits: NativeTensor;
    temperature: NativeTensor;
    topK: NativeTensor;
    topP: NativeTensor;
    seeds: NativeTensor;
    positions: NativeTensor;
    tokens: NativeTensor;
    logprobs: NativeTensor;
    topIds?: NativeTensor;
    topLogprobs?: NativeTensor;
  }): Promise<void>;
}

export interface CudaDeviceInfo {
  index: number;
  name: string;
  computeCapability: string;
  totalMemoryBytes: number;
  freeMemoryBytes: number;
  multiprocessors: number;
}

export interface DeviceReport {
  cpu: { threads: number; hardwareThreads: number; simd: "avx2" | "avx512" };
  cuda: { compiled: boolean; available: boolean; reason?: string; runtimeVersion: string; devices: CudaDeviceInfo[] };
}

export interface Addon {
  tensor(device: DeviceKind, dtype: DType, shape: number[]): NativeTensor;
  listDevices(): DeviceReport;
  /** Sets the CPU thread pool size (<= 0: hardware concurrency); returns the new size. Results never depend on it. */
  setThreads(n: number): number;
  liveBytes(device: DeviceKind): number;
  readonly cudaCompiled: boolean;
  readonly ops: NativeOps;
}

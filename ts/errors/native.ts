// The native boundary's wrapper: what the addon throws or rejects with becomes a NativeError, on the failure path
// only (ts/model calls it in a catch or as a then()'s rejection handler). Internal: not re-exported by index.ts.
import { DeliberateError, NativeError } from "./deliberateError.js";

/**
 * A failure the addon threw or rejected with, as a NativeError keeping its message (and the original as `cause`);
 * a DeliberateError passes through. For the failure path only: `promise.catch(rethrowNative)`.
 */
export function asNativeError(e: unknown): DeliberateError {
  if (e instanceof DeliberateError) return e;
  return new NativeError(e instanceof Error ? e.message : String(e), { cause: e });
}

/** `promise.then(ok, rethrowNative)`: a rejection from the addon becomes a NativeError. */
export function rethrowNative(e: unknown): never {
  throw asNativeError(e);
}

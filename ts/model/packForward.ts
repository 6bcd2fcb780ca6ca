// A forward batch packed into two typed arrays for NativeModel.forwardPacked (layout in ts/native/addonTypes.ts):
// reading a batch object through N-API cost ~4 us a sequence on the JS thread before every step (~1 ms at 256
// sequences, while the device waits), reading these two arrays costs next to nothing. Only values the arrays hold
// exactly are packed (integers in int32 but -0, booleans, plain Int32Arrays, numbers, u64 seeds); a batch with
// anything else (a Proxy, a subclass, a look-alike object) returns null and goes through forward(batch), whose checks
// name what is wrong. The ranges are checked natively, by the one rule both paths share.
import { types } from "node:util";
import type { NativeForwardBatch, NativeForwardSequence } from "../native/addonTypes.js";

const HEADER = 6;
const SEQ_HEADER = 10;
const TWO_32 = 2 ** 32;

let ints = new Int32Array(1024);
let floats = new Float32Array(64);
/** Set while a batch is being packed: a getter in a batch that packs another one gets the object path. */
let packing = false;

// -0 is left to the object path, whose messages print it as such.
const isInt32 = (v: unknown): v is number =>
  typeof v === "number" && Number.isInteger(v) && v >= -(2 ** 31) && v < 2 ** 31 && !Object.is(v, -0);
/** A plain Int32Array: not a subclass (its length could lie), a Proxy or an object that only inherits from one. */
const isPlainInt32Array = (v: unknown): v is Int32Array =>
  types.isInt32Array(v) && Object.getPrototypeOf(v) === Int32Array.prototype;
/** An optional integer field: its value (default when absent), or null when it cannot be packed. */
const intOr = (v: unknown, def: number): number | null => (v === undefined || v === null ? def : isInt32(v) ? v : null);
/** An optional boolean field as a flag bit, or null when it is not a boolean. */
const flag = (v: unknown, def: boolean, bit: number): number | null => {
  if (v === undefined || v === null) return def ? bit : 0;
  return typeof v === "boolean" ? (v ? bit : 0) : null;
};
const numOr = (v: unknown, def: number): number | null =>
  v === undefined || v === null ? def : typeof v === "number" ? v : null;

/** [low, high] 32-bit halves of a u64 seed, or null for anything forward() would reject. */
function seedHalves(v: unknown): [number, number] | null {
  if (v === undefined || v === null) return [0, 0];
  if (typeof v === "number")
    return Number.isSafeInteger(v) && v >= 0 ? [(v % TWO_32) | 0, Math.floor(v / TWO_32) | 0] : null;
  if (typeof v === "bigint")
    return v >= 0n && v < 1n << 64n ? [Number(v & 0xffffffffn) | 0, Number(v >> 32n) | 0] : null;
  return null;
}

/** Room for n ints, keeping what is written. */
function ensure(n: number): void {
  if (ints.length >= n) return;
  const grown = new Int32Array(Math.max(n, 2 * ints.length));
  grown.set(ints);
  ints = grown;
}

/** Writes one sequence at `at`; returns the next offset, or -1 when it cannot be packed. */
function packSequence(s: NativeForwardSequence, i: number, at: number): number {
  const { tokens, blockTable } = s;
  if (!isPlainInt32Array(tokens) || !isPlainInt32Array(blockTable)) return -1;
  // One capture index: forward(batch) turns it into a list after checking it; rare, so it takes that path.
  if (s.captureHiddenLayer !== undefined && s.captureHiddenLayer !== null && s.captureHiddenLayer !== -1) return -1;
  const captures = s.captureHiddenLayers;
  if (captures !== undefined && captures !== null && !isPlainInt32Array(captures)) return -1;
  const allowed = s.allowedTokens;
  const hasAllowed = allowed !== undefined && allowed !== null;
  if (hasAllowed && !isPlainInt32Array(allowed)) return -1;
  const late = intOr(s.lateMask, -1);
  if (late === null) return -1;
  const startPos = isInt32(s.startPos) ? s.startPos : null;
  const numTop = intOr(s.numTopLogprobs, 0);
  const confidenceK = intOr(s.confidenceTopK, 0);
  const emit = flag(s.emitToken, true, 1),
    all = flag(s.emitAll, false, 2),
    fixed = flag(s.fixedSchedule, false, 4);
  const sp = s.sampling;
  if (sp !== undefined && sp !== null && typeof sp !== "object") return -1;
  const temperature = numOr(sp?.temperature, 0),
    topP = numOr(sp?.topP, 1),
    topK = intOr(sp?.topK, 0);
  const seed = seedHalves(sp?.seed);
  if (startPos === null || numTop === null || confidenceK === null || emit === null || all === null || fixed === null)
    return -1;
  if (temperature === null || topP === null || topK === null || seed === null) return -1;
  const nc = captures?.length ?? 0;
  // allowedTokens, when given: flag 8, and [words, ...words] after the capture indices; lateMask: flag 16, [row].
  const na = hasAllowed ? 1 + allowed.length : 0;
  const nl = late === -1 ? 0 : 1;
  ensure(at + SEQ_HEADER + tokens.length + blockTable.length + nc + na + nl);
  ints[at] = tokens.length;
  ints[at + 1] = startPos;
  ints[at + 2] = blockTable.length;
  ints[at + 3] = numTop;
  ints[at + 4] = confidenceK;
  ints[at + 5] = emit | all | fixed | (hasAllowed ? 8 : 0) | (nl === 1 ? 16 : 0);
  ints[at + 6] = topK;
  ints[at + 7] = nc;
  ints[at + 8] = seed[0];
  ints[at + 9] = seed[1];
  at += SEQ_HEADER;
  if (tokens.length === 1) ints[at] = tokens[0];
  else ints.set(tokens, at);
  at += tokens.length;
  ints.set(blockTable, at);
  at += blockTable.length;
  if (nc > 0) ints.set(captures!, at);
  at += nc;
  if (hasAllowed) {
    ints[at] = allowed.length;
    ints.set(allowed, at + 1);
    at += na;
  }
  if (nl === 1) ints[at++] = late;
  floats[2 * i] = temperature;
  floats[2 * i + 1] = topP;
  return at;
}

/** The batch packed for forwardPacked (views of module buffers, valid until the next call), or null when some
 *  field cannot be packed exactly (forward(batch) then checks it and names it). */
export function packForward(batch: NativeForwardBatch): { ints: Int32Array; floats: Float32Array } | null {
  if (packing || batch === null || typeof batch !== "object") return null;
  packing = true;
  try {
    return pack(batch);
  } finally {
    packing = false;
  }
}

function pack(batch: NativeForwardBatch): { ints: Int32Array; floats: Float32Array } | null {
  const seqs = batch.sequences;
  if (!Array.isArray(seqs) || types.isProxy(seqs)) return null;
  const gemmSplitK = intOr(batch.gemmSplitK, NaN),
    kvSplits = intOr(batch.kvSplits, NaN),
    fixedSplitK = intOr(batch.fixedGemmSplitK, 1);
  const logits = flag(batch.returnLogits, false, 1),
    fast = flag(batch.fastSplitK, false, 2),
    profile = flag(batch.profile, false, 4);
  if (
    gemmSplitK === null ||
    kvSplits === null ||
    fixedSplitK === null ||
    logits === null ||
    fast === null ||
    profile === null
  )
    return null;
  if (Number.isNaN(gemmSplitK) || Number.isNaN(kvSplits)) return null; // required: forward(batch) names the missing one
  const copies = batch.pageCopies;
  let nCopies = 0;
  if (copies !== undefined && copies !== null) {
    if (!isPlainInt32Array(copies.src) || !isPlainInt32Array(copies.dst)) return null;
    if (copies.src.length !== copies.dst.length) return null; // forward(batch) names the mismatch
    nCopies = copies.src.length;
  }
  ensure(HEADER + 2 * nCopies + seqs.length * (SEQ_HEADER + 2));
  if (floats.length < 2 * seqs.length) floats = new Float32Array(Math.max(2 * seqs.length, 2 * floats.length));
  ints[0] = seqs.length;
  ints[1] = gemmSplitK;
  ints[2] = kvSplits;
  ints[3] = fixedSplitK;
  ints[4] = logits | fast | profile;
  ints[5] = nCopies;
  let at = HEADER;
  if (nCopies > 0) {
    ints.set(copies!.src, at);
    ints.set(copies!.dst, at + nCopies);
    at += 2 * nCopies;
  }
  for (let i = 0; i < seqs.length; i++) {
    const s = seqs[i];
    if (s === null || typeof s !== "object") return null;
    at = packSequence(s, i, at);
    if (at < 0) return null;
  }
  return { ints: ints.subarray(0, at), floats: floats.subarray(0, 2 * seqs.length) };
}

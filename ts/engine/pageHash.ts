// Chained page hash for the prefix cache: hash(page i) = H(hash(page i - 1), tokens of page i), so equal hashes mean
// (with overwhelming probability) equal whole prefixes, not just equal pages. Two independent 32-bit lanes
// (murmur3-style mixing) are folded into one 53-bit integer so the hash is a plain JS number usable as a Map key.
// Hits are still confirmed by comparing tokens and the parent hash (blockManager.ts), so a collision cannot
// hand a sequence someone else's KV.

/** Hash of "no parent": the first page of every sequence chains from this. */
export const ROOT_HASH = 0;

const TWO_POW_32 = 4294967296;

function mix(h: number, k: number): number {
  k = Math.imul(k, 0xcc9e2d51);
  k = (k << 15) | (k >>> 17);
  k = Math.imul(k, 0x1b873593);
  h ^= k;
  h = (h << 13) | (h >>> 19);
  return (Math.imul(h, 5) + 0xe6546b64) | 0;
}

function finalize(h: number, len: number): number {
  h ^= len;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** 53-bit hash of (parentHash, tokens). */
export function hashPage(parentHash: number, tokens: ArrayLike<number>): number {
  const parentLo = (parentHash % TWO_POW_32) | 0;
  const parentHi = Math.floor(parentHash / TWO_POW_32) | 0;
  let a = mix(0x9747b28c, parentLo);
  let b = mix(0x5bd1e995, parentHi);
  a = mix(a, parentHi);
  b = mix(b, parentLo);
  for (let i = 0; i < tokens.length; i++) {
    a = mix(a, tokens[i]);
    b = mix(b, tokens[i] ^ 0x2545f491);
  }
  const lo = finalize(a, tokens.length);
  const hi = finalize(b ^ lo, tokens.length) & 0x1fffff; // 21 bits: 32 + 21 = 53
  return hi * TWO_POW_32 + lo;
}

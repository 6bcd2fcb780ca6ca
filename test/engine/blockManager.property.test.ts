// Property test: random operation sequences (admit with prefix hits, grow, fork, truncate, free) against a shadow
// KV that records which token each page slot holds. After every operation: refcounts equal the number of block
// tables holding each page, free + used == total, free pages have refcount 0, every computed position of every
// live sequence reads back its own token (so no shared page was written, no copy was missed, no prefix hit
// handed out foreign KV), and at the end nothing leaks.
import { describe, expect, it } from "vitest";
import { BlockManager, type PageCopy } from "../../ts/engine/blockManager.js";
import { pagesFor, Sequence } from "../../ts/engine/sequence.js";
import { makeRng, type Rng } from "../helpers/prng.js";

const PAGE = 4;

class Harness {
  readonly bm: BlockManager;
  readonly live: Sequence[] = [];
  /** shadow[page][slot] = token id written there, -1 if never written. */
  readonly shadow: number[][];
  private nextId = 0;

  constructor(
    numPages: number,
    private readonly rng: Rng,
  ) {
    this.bm = new BlockManager(numPages, PAGE);
    this.shadow = Array.from({ length: numPages }, () => new Array<number>(PAGE).fill(-1));
  }

  /** Prompts drawn from a few shared stems so prefix hits happen often. */
  randomTokens(): number[] {
    const stem = this.rng.int(0, 3);
    const stemLen = this.rng.int(0, 3 * PAGE);
    const tail = this.rng.int(1, 2 * PAGE);
    const tokens = Array.from({ length: stemLen }, (_, i) => stem * 100 + i);
    for (let i = 0; i < tail; i++) tokens.push(this.rng.int(0, 5));
    return tokens;
  }

  admit(): void {
    const seq = new Sequence(this.nextId++, this.randomTokens(), 0, PAGE, 0);
    this.bm.recordLookup(seq.numTokens, this.bm.allocatePrefix(seq));
    this.live.push(seq);
    if (!this.compute(seq, seq.numUncomputedTokens)) this.freeSeq(seq);
  }

  /** Writes the KV of the next n tokens (as the runner would), or returns false when the pool is too full. */
  compute(seq: Sequence, n: number): boolean {
    if (n <= 0) return true;
    if (!this.bm.canAppend(seq, n)) return false;
    const copies: PageCopy[] = this.bm.appendSlots(seq, n);
    for (const { src, dst } of copies) this.shadow[dst] = this.shadow[src].slice();
    for (let p = seq.numComputedTokens; p < seq.numComputedTokens + n; p++) {
      this.shadow[seq.blockTable[Math.floor(p / PAGE)]][p % PAGE] = seq.tokens[p];
    }
    this.bm.commitComputed(seq, seq.numComputedTokens + n);
    return true;
  }

  grow(seq: Sequence): void {
    const extra = this.rng.int(0, 6);
    for (let i = 0; i < extra; i++) seq.appendToken(this.rng.int(0, 5));
    this.compute(seq, this.rng.int(0, seq.numUncomputedTokens));
  }

  fork(parent: Sequence): void {
    const child = new Sequence(this.nextId++, parent.tokens.slice(), parent.numPromptTokens, PAGE, 0);
    this.bm.fork(parent, child);
    this.live.push(child);
  }

  truncate(seq: Sequence): void {
    const length = this.rng.int(1, seq.numTokens);
    this.bm.truncate(seq, length);
    seq.truncateTokens(length);
  }

  freeSeq(seq: Sequence): void {
    this.bm.free(seq);
    this.live.splice(this.live.indexOf(seq), 1);
  }

  step(): void {
    const op = this.rng.int(0, 9);
    if (this.live.length === 0 || op <= 2) return this.admit();
    const seq = this.rng.pick(this.live);
    if (op <= 5) this.grow(seq);
    else if (op === 6) this.fork(seq);
    else if (op === 7) this.truncate(seq);
    else this.freeSeq(seq);
  }

  /** Throws (with the offending page or position) on the first broken invariant; plain checks keep 600 steps fast. */
  checkInvariants(): void {
    const bm = this.bm;
    const fail = (what: string): never => {
      throw new Error(`invariant broken: ${what}`);
    };
    const refs = new Array<number>(bm.numPages).fill(0);
    for (const seq of this.live) {
      if (new Set(seq.blockTable).size !== seq.blockTable.length) fail(`seq ${seq.id} holds a page twice`);
      if (seq.blockTable.length !== pagesFor(seq.numComputedTokens, PAGE)) fail(`seq ${seq.id} holds extra pages`);
      if (seq.numComputedTokens > seq.numTokens) fail(`seq ${seq.id} computed past its tokens`);
      for (const id of seq.blockTable) refs[id]++;
      for (let p = 0; p < seq.numComputedTokens; p++) {
        const slot = this.shadow[seq.blockTable[Math.floor(p / PAGE)]][p % PAGE];
        if (slot !== seq.tokens[p]) fail(`seq ${seq.id} position ${p} reads token ${slot}, expected ${seq.tokens[p]}`);
      }
    }
    let free = 0;
    for (let id = 0; id < bm.numPages; id++) {
      if (bm.refCount(id) !== refs[id]) fail(`page ${id} refcount ${bm.refCount(id)}, referenced ${refs[id]} times`);
      if (refs[id] === 0) free++;
    }
    if (bm.numFreePages !== free) fail(`${bm.numFreePages} pages on the free list, ${free} unreferenced`);
    if (bm.numFreePages + bm.numUsedPages !== bm.numPages) fail("free + used != total");
  }
}

describe("BlockManager under random operation sequences", () => {
  for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
    it(`keeps refcounts, free list and KV contents consistent (seed ${seed})`, () => {
      const h = new Harness(seed % 2 === 0 ? 12 : 40, makeRng(seed));
      for (let i = 0; i < 600; i++) {
        h.step();
        h.checkInvariants();
      }
      const stats = h.bm.stats();
      expect(stats.hitTokens).toBeGreaterThan(0); // the run exercised prefix hits
      while (h.live.length > 0) h.freeSeq(h.live[0]);
      h.checkInvariants();
      expect(h.bm.numFreePages).toBe(h.bm.numPages); // no leak
    });
  }
});

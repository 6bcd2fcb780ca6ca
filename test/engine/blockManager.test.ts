import { describe, expect, it } from "vitest";
import { BlockManager } from "../../ts/engine/blockManager.js";
import { Sequence } from "../../ts/engine/sequence.js";

const PAGE = 4;
let nextId = 0;
const seqOf = (tokens: number[]): Sequence => new Sequence(nextId++, tokens, tokens.length, PAGE, 0);
const range = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i);

/** Admits and computes every token but the last (the state right before sampling). */
function prefill(bm: BlockManager, seq: Sequence): void {
  bm.allocatePrefix(seq);
  bm.appendSlots(seq, seq.numTokens - 1 - seq.numComputedTokens);
  bm.commitComputed(seq, seq.numTokens - 1);
}

describe("BlockManager", () => {
  it("fork shares every page and copies a shared partial page on first write only", () => {
    const bm = new BlockManager(16, PAGE);
    const parent = seqOf(range(0, 7)); // 6 computed: page 0 full, page 1 holds 2
    prefill(bm, parent);
    const child = seqOf(parent.tokens.slice());
    bm.fork(parent, child);
    expect(child.blockTable).toEqual(parent.blockTable);
    expect(parent.blockTable.map((id) => bm.refCount(id))).toEqual([2, 2]);
    const used = bm.numUsedPages;

    const copies = bm.appendSlots(child, 1);
    expect(copies).toEqual([{ src: parent.blockTable[1], dst: child.blockTable[1] }]);
    expect(child.blockTable[0]).toBe(parent.blockTable[0]);
    expect(bm.refCount(parent.blockTable[0])).toBe(2);
    expect(bm.refCount(parent.blockTable[1])).toBe(1);
    expect(bm.numUsedPages).toBe(used + 1); // only the divergent page
    expect(bm.appendSlots(parent, 1)).toEqual([]); // parent's page is exclusive again
  });

  it("revives freed pages from the prefix cache and leaves the last token to compute", () => {
    const bm = new BlockManager(16, PAGE);
    const a = seqOf(range(0, 13)); // 12 computed: 3 full pages
    prefill(bm, a);
    const pagesOfA = a.blockTable.slice();
    bm.free(a);
    expect(bm.numUsedPages).toBe(0);

    const b = seqOf(range(0, 13));
    expect(bm.allocatePrefix(b)).toBe(12);
    expect(b.blockTable).toEqual(pagesOfA);
    expect(b.numCachedTokens).toBe(12);
    const c = seqOf(range(0, 12)); // exactly 3 pages: the third must be recomputed for its logits
    expect(bm.allocatePrefix(c)).toBe(8);
  });

  it("keys pages by their whole prefix, not their own tokens alone", () => {
    const bm = new BlockManager(16, PAGE);
    prefill(bm, seqOf([1, 2, 3, 4, 9, 9, 9, 9, 0]));
    expect(bm.matchPrefix([1, 2, 3, 4, 9, 9, 9, 9, 5])).toBe(8);
    expect(bm.matchPrefix([7, 7, 7, 7, 9, 9, 9, 9, 5])).toBe(0);
    expect(bm.matchPrefix([1, 2, 3, 5, 9, 9, 9, 9, 5])).toBe(0);
  });

  it("truncate releases pages past the length and uncaches a page left partial", () => {
    const bm = new BlockManager(16, PAGE);
    const seq = seqOf(range(0, 11)); // 10 computed: pages 0, 1 full and cached, page 2 partial
    prefill(bm, seq);
    const [p0, p1, p2] = seq.blockTable;
    expect([bm.isCached(p0), bm.isCached(p1), bm.isCached(p2)]).toEqual([true, true, false]);
    bm.truncate(seq, 6);
    expect(seq.blockTable).toEqual([p0, p1]);
    expect(seq.numComputedTokens).toBe(6);
    expect(bm.refCount(p2)).toBe(0);
    expect(bm.isCached(p1)).toBe(false); // it will be rewritten from position 6
    expect(bm.isCached(p0)).toBe(true);
  });

  it("truncating a shared full page keeps it cached for the sharer and copies before rewriting", () => {
    const bm = new BlockManager(16, PAGE);
    const parent = seqOf(range(0, 9)); // pages 0, 1 full
    prefill(bm, parent);
    const child = seqOf(parent.tokens.slice());
    bm.fork(parent, child);
    bm.truncate(child, 6);
    expect(bm.isCached(parent.blockTable[1])).toBe(true);
    expect(bm.appendSlots(child, 1)).toEqual([{ src: parent.blockTable[1], dst: child.blockTable[1] }]);
  });

  it("evicts never-hashed free pages first, then cached pages least recently freed, never referenced ones", () => {
    const bm = new BlockManager(4, PAGE);
    const a = seqOf(range(0, 9)); // 8 computed: 2 cached pages
    prefill(bm, a);
    const [a0, a1] = a.blockTable;
    const holder = seqOf(range(100, 5)); // holds 1 page
    prefill(bm, holder);
    bm.free(a); // a1 freed before a0: a1 is least recently freed
    const b = seqOf(range(50, 2));
    prefill(bm, b); // takes the one never-hashed free page
    expect([bm.isCached(a0), bm.isCached(a1)]).toEqual([true, true]);
    const c = seqOf(range(60, 2));
    prefill(bm, c);
    expect(c.blockTable).toEqual([a1]);
    expect([bm.isCached(a0), bm.isCached(a1)]).toEqual([true, false]);
    expect(bm.canAppend(c, 4)).toBe(true); // a0 is evictable
    expect(bm.canAppend(c, 8)).toBe(false);
    expect(() => bm.appendSlots(c, 8)).toThrow(/needs 2 pages, 1 free/);
  });

  it("reports a double free instead of corrupting the free list", () => {
    const bm = new BlockManager(4, PAGE);
    const a = seqOf(range(0, 6));
    prefill(bm, a);
    const alias = seqOf(a.tokens.slice());
    alias.assignPages(a.blockTable, a.numComputedTokens); // shared without fork: refcounts not raised
    bm.free(a);
    expect(() => bm.free(alias)).toThrow(/double free of page/);
  });
});

describe("Sequence.blockTableArray (the forward's copy of the pages)", () => {
  it("is one array until the pages change, a new one after each change, and never rewritten once handed out", () => {
    const seq = seqOf([1, 2, 3]);
    seq.pushPage(7);
    const first = seq.blockTableArray;
    expect(Array.from(first)).toEqual([7]);
    expect(seq.blockTableArray).toBe(first);
    const changes: Array<[string, () => void, number[]]> = [
      ["pushPage", () => seq.pushPage(9), [7, 9]],
      ["setPage", () => seq.setPage(0, 4), [4, 9]],
      ["keepPages", () => seq.keepPages(1), [4]],
      ["assignPages", () => seq.assignPages([5, 6, 8], 3), [5, 6, 8]],
    ];
    let before = first;
    for (const [what, change, want] of changes) {
      const kept = Array.from(before);
      change();
      const now = seq.blockTableArray;
      expect(now, what).not.toBe(before);
      expect(Array.from(now), what).toEqual(want);
      expect(Array.from(before), `${what}: the array handed out before`).toEqual(kept);
      before = now;
    }
  });
});

// BlockManager: the KV pages of one model's pool, in ids only (the runner does the tensor work it asks for).
// Each page has a refcount (sequences whose blockTable holds it). Forked sequences share pages; a shared page is
// copied before it is written (copy-on-write). Full computed pages are registered in the prefix cache under a
// chained hash (pageHash.ts); freed pages keep their hash and sit in an LRU free list, so a later request with the
// same prefix revives them instead of recomputing; they are evicted (hash dropped) only when a fresh page is
// needed and no never-hashed free page is left.
import { hashPage, ROOT_HASH } from "./pageHash.js";
import { pagesFor, type Sequence } from "./sequence.js";

/** The runner must copy page src to page dst (both K and V, every layer) before the step's forward writes. */
/** What a user does about a KV pool that is too small (the options of loadModel that size it). */
export const KV_POOL_ADVICE = "raise the KV pool (loadModel's kvPages or kvMemoryBytes)";

export interface PageCopy {
  src: number;
  dst: number;
}

export interface BlockManagerStats {
  numPages: number;
  usedPages: number;
  freePages: number;
  /** Free pages still holding a prefix-cache entry (revivable). */
  cachedFreePages: number;
  /** Tokens looked up in the prefix cache at admission, and how many were hits. */
  queriedTokens: number;
  hitTokens: number;
}

interface Page {
  readonly id: number;
  refCount: number;
  /** Prefix-cache key when the page is full and computed, else null. */
  hash: number | null;
  /** Chain parent of `hash` and the page's tokens, to confirm a hit exactly. */
  parentHash: number;
  tokens: number[] | null;
}

export class BlockManager {
  private readonly pages: Page[];
  /** Free pages with no cache entry; allocated first. Insertion-ordered. */
  private readonly freePlain = new Set<number>();
  /** Free pages with a cache entry, least recently freed first (eviction order). */
  private readonly freeCached = new Set<number>();
  private readonly hashToPage = new Map<number, number>();
  private queriedTokens = 0;
  private hitTokens = 0;

  constructor(
    readonly numPages: number,
    readonly pageSize: number,
  ) {
    if (!Number.isInteger(numPages) || numPages < 1)
      throw new Error(`BlockManager: numPages must be an integer >= 1, got ${numPages}`);
    if (!Number.isInteger(pageSize) || pageSize < 1)
      throw new Error(`BlockManager: pageSize must be an integer >= 1, got ${pageSize}`);
    this.pages = Array.from({ length: numPages }, (_, id) => ({
      id,
      refCount: 0,
      hash: null,
      parentHash: ROOT_HASH,
      tokens: null,
    }));
    for (let id = 0; id < numPages; id++) this.freePlain.add(id);
  }

  get numFreePages(): number {
    return this.freePlain.size + this.freeCached.size;
  }
  get numUsedPages(): number {
    return this.numPages - this.numFreePages;
  }
  refCount(pageId: number): number {
    return this.pages[pageId].refCount;
  }
  /** Whether the page is registered in the prefix cache (test and debugging aid). */
  isCached(pageId: number): boolean {
    const page = this.pages[pageId];
    return page.hash !== null && this.hashToPage.get(page.hash) === pageId;
  }

  stats(): BlockManagerStats {
    return {
      numPages: this.numPages,
      usedPages: this.numUsedPages,
      freePages: this.numFreePages,
      cachedFreePages: this.freeCached.size,
      queriedTokens: this.queriedTokens,
      hitTokens: this.hitTokens,
    };
  }

  /** Tokens of `tokens` an admission would take from the prefix cache now (read-only; for the lpm policy). */
  matchPrefix(tokens: readonly number[], kvNamespace = 0): number {
    let parent = namespaceRoot(kvNamespace);
    let matched = 0;
    for (let i = 0; i < this.maxCachedPages(tokens.length); i++) {
      const pageTokens = tokens.slice(i * this.pageSize, (i + 1) * this.pageSize);
      const page = this.lookup(parent, pageTokens);
      if (page === undefined) break;
      parent = page.hash!;
      matched += this.pageSize;
    }
    return matched;
  }

  /**
   * Admission: starts a sequence with no pages on the longest cached prefix of its tokens (revived pages leave the
   * free list). Sets numComputedTokens (and numCachedTokens on first admission); returns the cached token count. At least the last
   * token is always left to compute, since its logits give the next token.
   */
  allocatePrefix(seq: Sequence): number {
    if (seq.blockTable.length !== 0 || seq.numComputedTokens !== 0) {
      throw new Error(`BlockManager.allocatePrefix: sequence ${seq.id} already holds ${seq.blockTable.length} pages`);
    }
    let parent = namespaceRoot(seq.kvNamespace);
    for (let i = 0; i < this.maxCachedPages(seq.numTokens); i++) {
      const page = this.lookup(parent, seq.pageTokens(i));
      if (page === undefined) break;
      if (page.refCount === 0) this.freeCached.delete(page.id);
      page.refCount++;
      seq.pushPage(page.id);
      parent = page.hash!;
    }
    const cached = seq.blockTable.length * this.pageSize;
    seq.setNumComputed(cached);
    // Usage reports the first admission's savings; a recompute after preemption reviving its own pages is not one.
    if (seq.numPreemptions === 0) seq.numCachedTokens = cached;
    return cached;
  }

  /** Counts an admission's prefix lookup in the hit-rate stats (once per admission, not per attempt). */
  recordLookup(queriedTokens: number, hitTokens: number): void {
    this.queriedTokens += queriedTokens;
    this.hitTokens += hitTokens;
  }

  /** Fresh pages (growth plus copy-on-write copies) that writing the next `numNewTokens` tokens needs. */
  pagesNeeded(seq: Sequence, numNewTokens: number): number {
    const target = pagesFor(seq.numComputedTokens + numNewTokens, this.pageSize);
    let needed = Math.max(0, target - seq.blockTable.length);
    const end = Math.min(seq.blockTable.length, target);
    for (let i = Math.floor(seq.numComputedTokens / this.pageSize); i < end; i++) {
      if (this.pages[seq.blockTable[i]].refCount > 1) needed++;
    }
    return needed;
  }

  canAppend(seq: Sequence, numNewTokens: number): boolean {
    return this.pagesNeeded(seq, numNewTokens) <= this.numFreePages;
  }

  /**
   * Makes room to write positions [numComputedTokens, numComputedTokens + numNewTokens): pages written in place become
   * exclusive (a shared one is copied: the returned copies must run before the forward) and leave the prefix
   * cache; missing pages are allocated. The caller checked canAppend.
   */
  appendSlots(seq: Sequence, numNewTokens: number): PageCopy[] {
    const needed = this.pagesNeeded(seq, numNewTokens);
    if (needed > this.numFreePages) {
      throw new Error(`BlockManager.appendSlots: sequence ${seq.id} needs ${needed} pages, ${this.numFreePages} free`);
    }
    const copies: PageCopy[] = [];
    const target = pagesFor(seq.numComputedTokens + numNewTokens, this.pageSize);
    const end = Math.min(seq.blockTable.length, target);
    for (let i = Math.floor(seq.numComputedTokens / this.pageSize); i < end; i++) {
      const page = this.pages[seq.blockTable[i]];
      if (page.refCount > 1) {
        const dst = this.allocatePage();
        page.refCount--;
        seq.setPage(i, dst);
        copies.push({ src: page.id, dst });
      } else {
        this.uncache(page);
      }
    }
    while (seq.blockTable.length < target) seq.pushPage(this.allocatePage());
    return copies;
  }

  /**
   * After the forward wrote the KV: advances numComputedTokens and registers pages that became full in the prefix
   * cache (unless `cache` is false, e.g. for KV a verifier will overwrite).
   */
  commitComputed(seq: Sequence, numComputedTokens: number, cache = true): void {
    if (numComputedTokens > seq.blockTable.length * this.pageSize || numComputedTokens > seq.numTokens) {
      throw new Error(
        `BlockManager.commitComputed: ${numComputedTokens} tokens exceed sequence ${seq.id}'s pages or tokens`,
      );
    }
    const firstPage = Math.floor(seq.numComputedTokens / this.pageSize);
    seq.setNumComputed(numComputedTokens);
    if (!cache) return;
    for (let i = firstPage; i < Math.floor(numComputedTokens / this.pageSize); i++) {
      const page = this.pages[seq.blockTable[i]];
      if (page.hash !== null) continue;
      const parent = i === 0 ? namespaceRoot(seq.kvNamespace) : this.pages[seq.blockTable[i - 1]].hash;
      if (parent === null) return; // chain broken by an uncached page: later pages cannot be keyed
      page.tokens = seq.pageTokens(i);
      page.parentHash = parent;
      page.hash = hashPage(parent, page.tokens);
      this.hashToPage.set(page.hash, page.id);
    }
  }

  /** `child` (no pages yet) shares every page of `parent`. */
  fork(parent: Sequence, child: Sequence): void {
    if (child.blockTable.length !== 0)
      throw new Error(`BlockManager.fork: child sequence ${child.id} already holds pages`);
    for (const id of parent.blockTable) this.pages[id].refCount++;
    child.assignPages(parent.blockTable, parent.numComputedTokens);
  }

  /**
   * Rolls the KV back to its first `numTokens` tokens: pages past that are released; a page left partial and
   * exclusive leaves the prefix cache (it will be rewritten). Sequence tokens are the caller's business.
   */
  truncate(seq: Sequence, numTokens: number): void {
    const keep = Math.min(seq.numComputedTokens, Math.max(0, numTokens));
    const keepPages = pagesFor(keep, this.pageSize);
    for (let i = seq.blockTable.length - 1; i >= keepPages; i--) this.release(seq.blockTable[i]);
    seq.keepPages(keepPages);
    seq.setNumComputed(keep);
    if (keep % this.pageSize !== 0) {
      const last = this.pages[seq.blockTable[keepPages - 1]];
      if (last.refCount === 1) this.uncache(last);
    }
  }

  /** Releases all of a sequence's pages (last page first, so prefix pages are evicted last). */
  free(seq: Sequence): void {
    for (let i = seq.blockTable.length - 1; i >= 0; i--) this.release(seq.blockTable[i]);
    seq.assignPages([], 0);
  }

  private maxCachedPages(numTokens: number): number {
    return Math.floor(Math.max(0, numTokens - 1) / this.pageSize);
  }

  /** The cached page holding exactly `tokens` after the prefix keyed `parent`, if any. */
  private lookup(parent: number, tokens: readonly number[]): Page | undefined {
    if (tokens.length !== this.pageSize) return undefined;
    const id = this.hashToPage.get(hashPage(parent, tokens));
    if (id === undefined) return undefined;
    const page = this.pages[id];
    if (page.parentHash !== parent || page.tokens === null) return undefined;
    for (let t = 0; t < tokens.length; t++) if (page.tokens[t] !== tokens[t]) return undefined;
    return page;
  }

  private allocatePage(): number {
    let id: number | undefined = this.freePlain.values().next().value;
    if (id !== undefined) {
      this.freePlain.delete(id);
    } else {
      id = this.freeCached.values().next().value;
      if (id === undefined) throw new Error("BlockManager: no free page (caller must check canAppend first)");
      this.freeCached.delete(id);
      this.uncache(this.pages[id]);
    }
    this.pages[id].refCount = 1;
    return id;
  }

  private release(id: number): void {
    const page = this.pages[id];
    if (page.refCount <= 0) throw new Error(`BlockManager: double free of page ${id}`);
    if (--page.refCount > 0) return;
    if (page.hash !== null) this.freeCached.add(id);
    else this.freePlain.add(id);
  }

  private uncache(page: Page): void {
    if (page.hash === null) return;
    if (this.hashToPage.get(page.hash) === page.id) this.hashToPage.delete(page.hash);
    page.hash = null;
    page.tokens = null;
  }
}

/** Chain root of a prefix-cache namespace (0: ROOT_HASH), so equal tokens in two namespaces never share pages. */
function namespaceRoot(kvNamespace: number): number {
  return kvNamespace === 0 ? ROOT_HASH : hashPage(ROOT_HASH, [-1 - kvNamespace]);
}

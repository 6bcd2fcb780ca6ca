// A minimal page allocator for Model.generate's single sequences (the Engine has its own BlockManager with
// refcounts and prefix caching). Pages are ids into the native model's KV pool.

export class PagePool {
  private readonly free: number[] = [];

  constructor(readonly numPages: number) {
    for (let i = numPages - 1; i >= 0; i--) this.free.push(i);
  }

  get numFree(): number {
    return this.free.length;
  }

  /** Grows `table` to `numPages` pages; throws (allocating nothing) when the pool cannot supply them. */
  grow(table: number[], numPages: number): void {
    const need = numPages - table.length;
    if (need <= 0) return;
    if (need > this.free.length) {
      throw new Error(
        `KV pool exhausted: ${this.free.length} of ${this.numPages} pages free, ${need} more needed; ` +
          "pass a larger kvPages or kvMemoryBytes to loadModel, or run fewer generations at once",
      );
    }
    for (let i = 0; i < need; i++) table.push(this.free.pop()!);
  }

  release(table: number[]): void {
    for (const p of table) this.free.push(p);
    table.length = 0;
  }
}

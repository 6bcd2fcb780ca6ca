// A consistent-hash ring over replica ids (Karger et al.): each replica owns `virtualNodes` points on a 32-bit circle
// and a key belongs to the first point clockwise of its hash. Adding or removing one replica moves only the keys it
// owned. The ring is a pure function of the member ids, so two routers with the same view route alike.

/** FNV-1a over the UTF-16 code units of `s`, then a murmur3 finalizer so nearby strings spread over the circle. */
export function hash32(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

export class HashRing {
  /** Points sorted by position; `owners[i]` owns `points[i]`. */
  private readonly points: Uint32Array;
  private readonly owners: string[];
  readonly members: readonly string[];

  constructor(
    members: Iterable<string>,
    readonly virtualNodes = 64,
  ) {
    this.members = [...new Set(members)].sort();
    const pts: { at: number; id: string }[] = [];
    for (const id of this.members) for (let v = 0; v < virtualNodes; v++) pts.push({ at: hash32(`${id}#${v}`), id });
    // Ties (two replicas hashing a point alike) break by id, so the order never depends on insertion.
    pts.sort((a, b) => a.at - b.at || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    this.points = Uint32Array.from(pts, (p) => p.at);
    this.owners = pts.map((p) => p.id);
  }

  /** The replicas in the order a key visits them: its owner first, then each further replica clockwise, once each. */
  walk(key: string): string[] {
    const n = this.points.length;
    if (n === 0) return [];
    const h = hash32(key);
    let lo = 0;
    let hi = n;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.points[mid] < h) lo = mid + 1;
      else hi = mid;
    }
    const seen = new Set<string>();
    const out: string[] = [];
    for (let k = 0; k < n && out.length < this.members.length; k++) {
      const id = this.owners[(lo + k) % n];
      if (!seen.has(id)) {
        seen.add(id);
        out.push(id);
      }
    }
    return out;
  }

  /** The replica owning `key` (undefined on an empty ring). */
  owner(key: string): string | undefined {
    return this.walk(key)[0];
  }
}

// One validator for every options object users hand the library (engine options, requests, forks; the HTTP
// server's bodies reuse the same schemas): zod schemas checked here, every failure one InvalidOptionError naming the
// field (in its message and its `field`), the value as given (NaN as NaN, not null) and the fix; unknown fields are
// rejected naming the closest known one.
import { z } from "zod";
import { InvalidOptionError } from "../errors/index.js";

/**
 * The plain predicate of a schema built from field() and strictObject() (through .optional() / .nullable()), where
 * there is one: what zod would accept, without zod's per-parse bookkeeping (a request's schema costs ~45 us through
 * safeParse, a few us as plain calls, paid once a request and once a fork). parseOptions tries it first and asks zod
 * only when it says no, so zod still writes every error message, and a predicate can only ever be as strict as zod.
 */
const accepts = new WeakMap<z.ZodType, (v: unknown) => boolean>();

function predicateOf(t: z.ZodType): ((v: unknown) => boolean) | undefined {
  const own = accepts.get(t);
  if (own !== undefined) return own;
  if (t instanceof z.ZodAny) return () => true;
  if (t instanceof z.ZodOptional || t instanceof z.ZodNullable) {
    const inner = predicateOf(t.unwrap() as z.ZodType);
    if (inner === undefined) return undefined;
    return t instanceof z.ZodOptional ? (v) => v === undefined || inner(v) : (v) => v === null || inner(v);
  }
  return undefined;
}

/**
 * A scalar field: `ok` decides, `expected` is the fix the error states ("expected an integer >= 1"). One message
 * for every way a value can be wrong, so the user reads the rule, not a list of zod checks.
 */
export function field<T>(expected: string, ok: (v: unknown) => boolean): z.ZodType<T> {
  const t = z.custom<T>((v) => ok(v), { error: expected });
  accepts.set(t, ok);
  return t;
}

/** A field whose value is one of `values` (a string union such as a kernel mode); `orElse` adds another accepted kind. */
export function oneOf<T extends string>(
  values: readonly T[],
  orElse?: { expected: string; ok: (v: unknown) => boolean },
): z.ZodType<T> {
  const names = values.map((v) => `"${v}"`);
  const list = names.length <= 2 ? names.join(" or ") : `one of ${names.join(", ")}`;
  return field<T>(
    `expected ${list}${orElse ? ` or ${orElse.expected}` : ""}`,
    (v) => values.includes(v as T) || (orElse?.ok(v) ?? false),
  );
}

export const isInt =
  (lo: number, hi = Number.MAX_SAFE_INTEGER) =>
  (v: unknown): boolean =>
    Number.isInteger(v) && (v as number) >= lo && (v as number) <= hi;
export const isBool = (v: unknown): boolean => typeof v === "boolean";
export const isFiniteNumber = (v: unknown): boolean => typeof v === "number" && Number.isFinite(v);

/**
 * Parses `value` with `schema`; throws an InvalidOptionError whose message and `field` start with `where` (e.g.
 * "request", "Engine: options"): field "request.stopTokenIds[2]".
 */
export function parseOptions<S extends z.ZodType>(schema: S, value: unknown, where: string): z.output<S> {
  if (accepts.get(schema)?.(value) === true) return value as z.output<S>; // every field plain: the value as given
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const issue = r.error.issues[0];
  const at = issue.path.reduce<string>((s, k) => (typeof k === "number" ? `${s}[${k}]` : `${s}.${String(k)}`), where);
  throw new InvalidOptionError(describeIssue(issue, value, at), { field: at });
}

function describeIssue(issue: z.core.$ZodIssue, root: unknown, at: string): string {
  if (issue.code === "custom" && (issue.params as { unknownField?: boolean } | undefined)?.unknownField)
    return `${at} ${issue.message}`;
  return `${at} is ${show(valueAt(root, issue.path))}; ${issue.message}`;
}

function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = root;
  for (const k of path) v = v !== null && typeof v === "object" ? (v as Record<PropertyKey, unknown>)[k] : undefined;
  return v;
}

/**
 * An options object: the fields of `shape`, nothing else. An unknown field (a typo such as maxTokenz) is an error
 * naming the closest known field, as a user of vLLM's server expects, rather than silently ignored; it is reported
 * before the fields' own errors, since `{ promt: "..." }` is a misspelt prompt more than a missing one.
 */
export function strictObject<T extends z.ZodRawShape>(shape: T, expected: string) {
  const keys = Object.keys(shape);
  const onlyKnownKeys = z.unknown().superRefine((v, ctx) => {
    if (v === null || typeof v !== "object" || Array.isArray(v)) return; // not an object: the object schema says so
    for (const k of Object.keys(v)) {
      if (keys.includes(k)) continue;
      const near = closest(k, keys);
      ctx.addIssue({
        code: "custom",
        path: [k],
        params: { unknownField: true },
        message: `is not a known field; ${near ? `did you mean ${near}?` : `known fields: ${keys.join(", ")}`}`,
      });
    }
  });
  const schema = onlyKnownKeys.pipe(z.looseObject(shape, { error: expected }));
  const fields = Object.entries(shape).map(([k, t]) => [k, predicateOf(t as z.ZodType)] as const);
  if (fields.every(([, ok]) => ok !== undefined)) {
    const known = new Set(keys);
    accepts.set(schema, (v) => {
      if (v === null || typeof v !== "object" || Array.isArray(v)) return false;
      for (const k in v) if (!known.has(k) && Object.hasOwn(v, k)) return false; // own keys, as onlyKnownKeys reads them
      const o = v as Record<string, unknown>;
      for (const [k, ok] of fields) if (!ok!(o[k])) return false;
      return true;
    });
  }
  return schema;
}

/**
 * Prints a value as the user wrote it: NaN, Infinity and undefined as such, strings quoted, class instances by class,
 * long values cut.
 */
export function show(v: unknown): string {
  if (typeof v === "number") return Number.isNaN(v) ? "NaN" : String(v);
  if (v === undefined) return "undefined";
  if (typeof v === "function") return "a function";
  if (typeof v === "bigint") return `${v}n`;
  if (v !== null && typeof v === "object" && !Array.isArray(v)) {
    const proto = Object.getPrototypeOf(v) as object | null;
    const name = proto === null || proto === Object.prototype ? null : (proto.constructor?.name ?? null);
    if (name) return `${/^[AEIOU]/.test(name) ? "an" : "a"} ${name}`; // a Model, an AbortSignal: not their fields
  }
  let s: string;
  try {
    s = JSON.stringify(v) ?? String(v);
  } catch {
    s = String(v);
  }
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
}

/** The known name closest to `name` (edit distance <= a third of its length, at least 2), or null. */
export function closest(name: string, known: readonly string[]): string | null {
  let best: string | null = null;
  let bestDistance = Math.max(2, Math.floor(name.length / 3)) + 1;
  for (const k of known) {
    const d = editDistance(name.toLowerCase(), k.toLowerCase());
    if (d < bestDistance) [best, bestDistance] = [k, d];
  }
  return best;
}

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++)
      cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = cur;
  }
  return prev[b.length];
}

// A JSON number's range as an XGrammar EBNF expression: the decimal texts (no exponent) whose value lies between two
// bounds, each inclusive or exclusive, negative or fractional. @mlc-ai/web-xgrammar 0.1.27 gets such ranges wrong in a
// JSON Schema (schemaCheck.ts), so the schema check puts a placeholder where such a number sits and the grammar's EBNF
// gets this expression in its place (substituteNumbers).
//
// Built digit by digit, from the bounds' exact decimal spellings: the integer part as ranges of same-length digit
// strings, the fraction as the digit strings whose value 0.R lies between the bounds' fractions (a prefix that equals a
// bound keeps its constraint on the next digit; a larger / smaller digit frees it). A negative value is "-" and a
// magnitude > 0 (so "-0" is never written); integer parts have no leading zeros. Every text the expression allows is a
// value in the range, and every value in the range has a text it allows (its plain decimal spelling).

/** A bound of the range: its value, and whether the value itself is excluded. */
export interface NumberBound {
  value: number;
  strict: boolean;
}

/** The exact decimal spelling of a finite double, as its shortest round-trip text says it: integer and fraction digits. */
interface Decimal {
  int: string;
  frac: string;
}

function decimal(x: number): Decimal {
  const text = Math.abs(x).toString();
  const [mantissa, exp] = text.split("e");
  const [i, f = ""] = mantissa.split(".");
  let digits = i + f;
  let point = i.length + (exp === undefined ? 0 : Number(exp));
  if (point < 0) {
    digits = "0".repeat(-point) + digits;
    point = 0;
  }
  if (point > digits.length) digits += "0".repeat(point - digits.length);
  const int = digits.slice(0, point).replace(/^0+(?=.)/, "") || "0";
  return { int, frac: digits.slice(point).replace(/0+$/, "") };
}

/** Fraction digit strings R (0.R in range): whether R may be empty, and expressions for the non-empty ones. */
interface FractionSet {
  empty: boolean;
  alts: string[];
}

/**
 * The digit strings R with lo < 0.R < hi (<= for a bound not strict). lo / hi: a bound's fraction digits without
 * trailing zeros ("" is 0), null: no bound (0 inclusive below, 1 exclusive above).
 */
function fraction(lo: string | null, loStrict: boolean, hi: string | null, hiStrict: boolean): FractionSet {
  if (lo === "" && !loStrict) lo = null; // >= 0: every R
  if (hi === "") {
    // At most 0: R all zeros (0 < 0 has none; 0 <= R needs no strict lower bound above 0)
    if (hiStrict || lo !== null) return { empty: false, alts: [] };
    return { empty: true, alts: ['"0"+'] };
  }
  if (lo === null && hi === null) return { empty: true, alts: ["[0-9]+"] };
  if (lo === "" && hi === null) return { empty: false, alts: ["[0-9]* [1-9] [0-9]*"] }; // > 0: a digit not 0
  const empty = lo === null; // R empty is 0: below every lower bound left here, above no upper bound
  // The first digit: equal to a bound's keeps it on the rest; past it frees it.
  const lo0 = lo === null ? -1 : Number(lo[0] ?? "0");
  const hi0 = hi === null ? 10 : Number(hi[0]);
  const state = (d: number): string | null => {
    if (d < lo0 || d > hi0) return null;
    return `${d === lo0 ? "l" : ""}${d === hi0 ? "h" : ""}`;
  };
  const alts: string[] = [];
  for (let d = 0; d <= 9;) {
    const s = state(d);
    let e = d;
    while (e + 1 <= 9 && state(e + 1) === s) e++;
    if (s !== null) {
      const rest = fraction(
        s.includes("l") ? lo!.slice(1) : null,
        loStrict,
        s.includes("h") ? hi!.slice(1) : null,
        hiStrict,
      );
      const cls = d === e ? `"${d}"` : `[${d}-${e}]`;
      if (rest.alts.length === 0) {
        if (rest.empty) alts.push(cls);
      } else alts.push(`${cls} (${rest.alts.join(" | ")})${rest.empty ? "?" : ""}`);
    }
    d = e + 1;
  }
  return { empty, alts };
}

/** A fraction set as the text after an integer part: "" or "." and digits. null: none. */
function fractionText(f: FractionSet): string | null {
  if (f.alts.length === 0) return f.empty ? "" : null;
  const dotted = `"." (${f.alts.join(" | ")})`;
  return f.empty ? `(${dotted})?` : dotted;
}

/** Same-length digit strings from a to b (a <= b). */
function sameLength(a: string, b: string): string[] {
  if (a === b) return a === "" ? [""] : [`"${a}"`];
  let i = 0;
  while (a[i] === b[i]) i++;
  const prefix = i > 0 ? `"${a.slice(0, i)}" ` : "";
  const n = a.length - i - 1;
  const any = " [0-9]".repeat(n);
  const ai = Number(a[i]);
  const bi = Number(b[i]);
  const lowTail = a.slice(i + 1);
  const highTail = b.slice(i + 1);
  if (/^0*$/.test(lowTail) && /^9*$/.test(highTail)) return [`${prefix}[${ai}-${bi}]${any}`];
  const out: string[] = [];
  for (const t of sameLength(lowTail, "9".repeat(n))) out.push(`${prefix}"${ai}"${t === "" ? "" : " " + t}`);
  if (bi - ai >= 2) out.push(`${prefix}[${ai + 1}-${bi - 1}]${any}`);
  for (const t of sameLength("0".repeat(n), highTail)) out.push(`${prefix}"${bi}"${t === "" ? "" : " " + t}`);
  return out.map((x) => x.trim());
}

/** Integers from m to n (null: no end), without leading zeros. */
function integers(m: bigint, n: bigint | null): string[] {
  if (n !== null && m > n) return [];
  const out: string[] = [];
  const ml = m.toString().length;
  const nl = n === null ? ml : n.toString().length;
  for (let len = ml; len <= nl; len++) {
    const a = len === ml ? m : 10n ** BigInt(len - 1);
    const b = n !== null && len === nl ? n : 10n ** BigInt(len) - 1n;
    out.push(...sameLength(a.toString(), b.toString()));
  }
  if (n === null) out.push(`[1-9]${" [0-9]".repeat(ml)} [0-9]*`); // longer than m: all above it
  return out;
}

/** Non-negative numbers from a to b (null: no end): expressions of their texts. */
function magnitudes(a: Decimal, aStrict: boolean, b: Decimal | null, bStrict: boolean): string[] {
  const ia = BigInt(a.int);
  const ib = b === null ? null : BigInt(b.int);
  if (ib !== null && ia > ib) return [];
  const out: string[] = [];
  const withFraction = (int: string, f: FractionSet): void => {
    const t = fractionText(f);
    if (t !== null) out.push(`"${int}"${t === "" ? "" : " " + t}`);
  };
  if (ib !== null && ia === ib) {
    withFraction(a.int, fraction(a.frac, aStrict, b!.frac, bStrict));
    return out;
  }
  withFraction(a.int, fraction(a.frac, aStrict, null, false));
  const middle = integers(ia + 1n, ib === null ? null : ib - 1n);
  if (middle.length > 0) out.push(`(${middle.join(" | ")}) ("." [0-9]+)?`);
  if (b !== null) withFraction(b.int, fraction(null, false, b.frac, bStrict));
  return out;
}

/**
 * The JSON number texts in the range [lo, hi] (either end open when strict, absent when null) as one EBNF expression,
 * or null when no number lies in it.
 */
export function numberRangeEbnf(lo: NumberBound | null, hi: NumberBound | null): string | null {
  const alts: string[] = [];
  // value >= 0
  if (hi === null || hi.value > 0 || (hi.value === 0 && !hi.strict)) {
    const fromZero = lo === null || lo.value < 0;
    const a = fromZero ? decimal(0) : decimal(lo.value);
    alts.push(
      ...magnitudes(a, fromZero ? false : lo.strict, hi === null ? null : decimal(hi.value), hi?.strict ?? false),
    );
  }
  // value < 0: "-" and its magnitude, above 0
  if (lo === null || lo.value < 0) {
    const below = hi !== null && hi.value < 0;
    const a = below ? decimal(hi.value) : decimal(0);
    const mags = magnitudes(a, below ? hi.strict : true, lo === null ? null : decimal(lo.value), lo?.strict ?? false);
    if (mags.length > 0) alts.push(`"-" (${mags.join(" | ")})`);
  }
  return alts.length === 0 ? null : `(${alts.join(" | ")})`;
}

/** Where a schema's number is replaced: a const no schema writes, one per number (schemaCheck's placeholders). */
export const NUMBER_PLACEHOLDER_BASE = 7_350_000_000_000_000;

/**
 * XGrammar's EBNF of a schema whose numbers were placeholders, with each placeholder's literal replaced by a rule of
 * its range. A placeholder absent from the grammar sat where no value goes (an unused $defs entry); one whose digits
 * appear other than as their own literal throws (XGrammar wrote it some other way: the grammar would be wrong).
 */
export function substituteNumbers(ebnf: string, numbers: readonly string[]): string {
  let out = ebnf;
  const rules: string[] = [];
  numbers.forEach((expr, i) => {
    const digits = String(NUMBER_PLACEHOLDER_BASE + i);
    const literal = `"${digits}"`;
    const rule = `deliberate_number_${i}`;
    out = out.split(literal).join(rule);
    if (out.includes(digits)) throw new Error(`number placeholder ${i} is not its own literal in XGrammar's grammar`);
    rules.push(`${rule} ::= ${expr}`);
  });
  return `${out}\n${rules.join("\n")}\n`;
}

// What a JSON Schema may say before XGrammar compiles it. @mlc-ai/web-xgrammar 0.1.27 silently ignores some JSON
// Schema keywords (and gets a few wrong), so an answer generated under its grammar could violate the schema the request
// gave; a field that would change the output must be supported or refused by name, so each schema is walked here
// first: a keyword XGrammar does not honour is an InvalidOptionError naming its JSON path
// (`request.structured.schema.properties.x.not`), and a few it gets wrong are rewritten to an equivalent it gets right.
//
// Found by probing this build (grammar acceptance of violating instances against ajv; test/grammar/schemaCheck.test.ts
// pins each): ignored are `not`, `if`/`then`/`else`, `dependentRequired`/`dependentSchemas`, `multipleOf`,
// `uniqueItems`, `contains`, unevaluated*, `patternProperties` and `propertyNames` (with extra properties allowed),
// every `allOf` member after the first, `$ref` siblings, `$ref` to anything but `#` or `#/...` (anchors, remote URLs),
// keywords next to `anyOf` / `oneOf` / `enum` / `const`, keywords of a type list (`type: ["integer", "null"]` with
// `minimum`), type keywords with no `type` (`{"minimum": 5}`), `minLength`/`maxLength` next to a `pattern` (unless
// the pattern repeats one character class: then they become its bounded repetition, lengthPattern), and
// `format` values outside its list. `oneOf` is compiled as `anyOf`: kept only when its branches cannot overlap. Wrong:
// a number's two-sided range admits any fraction after its upper bound's integer part (`maximum: 3` lets 3.5 by) and
// past a negative lower bound's; a lone minimum above 0 admits every non-negative value, a lone negative maximum
// every non-positive one; fractional number bounds and exclusive bounds on numbers are not kept; an integer's lone
// `exclusiveMinimum` is ignored. Two-sided integer ranges and a number's lone maximum >= 0 are right: integer bounds
// are made two-sided (+-MAX_SAFE_INTEGER) and inclusive, number ranges of integer bounds from 0 up rewritten, and any
// other number range written as EBNF in the grammar (numberBounds, numberRange.ts). Keywords that only annotate
// (title, description, examples, default, $schema, $comment, deprecated, readOnly, writeOnly, $id, content*) and
// keywords JSON Schema does not define (validators ignore them too) pass.
import { InvalidOptionError } from "../errors/index.js";
import { NUMBER_PLACEHOLDER_BASE, numberRangeEbnf } from "./numberRange.js";

type Json = Record<string, unknown>;

/** Keywords XGrammar ignores, with what to do instead. */
const REFUSED: Record<string, string> = {
  not: "XGrammar cannot exclude values",
  if: "conditional schemas are not supported; use anyOf",
  then: "conditional schemas are not supported; use anyOf",
  else: "conditional schemas are not supported; use anyOf",
  dependentRequired: "not supported; list the properties in required, or use anyOf",
  dependentSchemas: "not supported; use anyOf",
  dependencies: "not supported; list the properties in required, or use anyOf",
  patternProperties: "not supported; list the properties in properties",
  propertyNames: "not supported; list the properties in properties",
  unevaluatedProperties: "not supported; use additionalProperties",
  unevaluatedItems: "not supported; use items",
  contains: "not supported",
  minContains: "not supported",
  maxContains: "not supported",
  uniqueItems: "XGrammar cannot keep array items distinct",
  multipleOf: "not supported",
  additionalItems: "not supported; use prefixItems and items",
  $dynamicRef: "not supported; use $ref to #/$defs/...",
  $dynamicAnchor: "not supported",
  $recursiveRef: "not supported; use $ref to #/$defs/...",
  $recursiveAnchor: "not supported",
  $anchor: "not supported; use $ref to #/$defs/...",
};

/** Keywords of one instance type: XGrammar reads them only next to that `type`. */
const TYPED: Record<string, string> = {
  minimum: "number",
  maximum: "number",
  exclusiveMinimum: "number",
  exclusiveMaximum: "number",
  minLength: "string",
  maxLength: "string",
  pattern: "string",
  format: "string",
  minItems: "array",
  maxItems: "array",
  prefixItems: "array",
  minProperties: "object",
  maxProperties: "object",
};

/** Keywords that only annotate: they never change which instances validate. */
const ANNOTATIONS = new Set([
  "title",
  "description",
  "examples",
  "default",
  "$schema",
  "$comment",
  "$id",
  "deprecated",
  "readOnly",
  "writeOnly",
  "contentEncoding",
  "contentMediaType",
  "contentSchema",
]);

/** JSON Schema's keywords that constrain values: the ones XGrammar reads, and the refused ones. */
const ASSERTIONS = new Set([
  "type",
  "enum",
  "const",
  "properties",
  "required",
  "additionalProperties",
  "items",
  "prefixItems",
  "minItems",
  "maxItems",
  "anyOf",
  "oneOf",
  "allOf",
  "$ref",
  "pattern",
  "minLength",
  "maxLength",
  "format",
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "minProperties",
  "maxProperties",
  ...Object.keys(REFUSED),
]);

/** String formats XGrammar 0.1.27 turns into a grammar (others it ignores). */
const FORMATS = new Set([
  "email",
  "date",
  "date-time",
  "time",
  "duration",
  "uri",
  "uri-reference",
  "uri-template",
  "uuid",
  "ipv4",
  "ipv6",
  "hostname",
  "json-pointer",
  "relative-json-pointer",
]);

// Exact patterns of the Gregorian calendar and the clock (RFC 3339; the dates as zod 4 writes them).
const DATE = String.raw`(?:(?:\d\d[2468][048]|\d\d[13579][26]|\d\d0[48]|[02468][048]00|[13579][26]00)-02-29|\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|(?:02)-(?:0[1-9]|1\d|2[0-8])))`;
const CLOCK = String.raw`(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d+)?`;
const OFFSET = String.raw`(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)`;
const OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])";
const EMAIL_ATOM = "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+";
const LABEL = "[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?";

/**
 * Formats XGrammar 0.1.27 writes too loosely (probed against ajv-formats: ipv4 "57.090.90.009", date "2023-02-29",
 * time "20:04:60+01:00", email "a@b"), as patterns whose every string the format accepts: ipv4, date and email exact
 * (ajv-formats' own definitions); date-time and time leave out RFC 3339's rarer forms (a lowercase t / z or a space
 * separator, a leap second, an offset without its colon) and time needs its offset, as ajv-formats does.
 */
const FORMAT_PATTERNS: Record<string, string> = {
  ipv4: `^(?:${OCTET}\\.){3}${OCTET}$`,
  date: `^${DATE}$`,
  "date-time": `^${DATE}T${CLOCK}${OFFSET}$`,
  time: `^${CLOCK}${OFFSET}$`,
  email: `^${EMAIL_ATOM}(?:\\.${EMAIL_ATOM})*@(?:${LABEL}\\.)+${LABEL}$`,
};

/** Formats XGrammar writes too loosely that no pattern here replaces. */
const FORMAT_REFUSED: Record<string, string> = {
  hostname:
    'is "hostname", which XGrammar writes too loosely (labels over 63 characters, no length limit); give a pattern',
};

/**
 * zod 4's patterns beside the format it writes with each (z.iso.datetime(), z.iso.date(), z.uuid(), z.guid(),
 * z.email(), z.ipv4(), z.ipv6()): each pattern's strings are the format's (the pattern alone is kept), except zod's
 * email, whose domain labels may end in "-" (ajv's may not): the two's intersection is kept. Matched by the exact text.
 */
const FORMAT_IMPLYING: Record<string, { format: string; pattern: string }> = Object.fromEntries(
  [
    ["date-time", `^${DATE}T(?:(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d+)?(?:Z))$`],
    [
      "date-time",
      `^${DATE}T(?:(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d+)?(?:Z|([+-](?:[01]\\d|2[0-3]):[0-5]\\d)))$`,
    ],
    ["date", `^${DATE}$`],
    [
      "uuid",
      "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$",
    ],
    ["uuid", "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"],
    [
      "email",
      "^(?:[A-Za-z0-9_'+\\-]+\\.)*[A-Za-z0-9_'+\\-]*[A-Za-z0-9_+-]@(?:[A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$",
      `^(?:[A-Za-z0-9_'+\\-]+\\.)*[A-Za-z0-9_'+\\-]*[A-Za-z0-9_+-]@(?:${LABEL}\\.)+[A-Za-z]{2,}$`,
    ],
    ["ipv4", `^(?:${OCTET}\\.){3}${OCTET}$`],
    [
      "ipv6",
      "^(([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,7}:|([0-9a-fA-F]{1,4}:){1,6}:[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,5}(:[0-9a-fA-F]{1,4}){1,2}|([0-9a-fA-F]{1,4}:){1,4}(:[0-9a-fA-F]{1,4}){1,3}|([0-9a-fA-F]{1,4}:){1,3}(:[0-9a-fA-F]{1,4}){1,4}|([0-9a-fA-F]{1,4}:){1,2}(:[0-9a-fA-F]{1,4}){1,5}|[0-9a-fA-F]{1,4}:((:[0-9a-fA-F]{1,4}){1,6})|:((:[0-9a-fA-F]{1,4}){1,7}|:))$",
    ],
  ].map(([format, pattern, kept]) => [pattern, { format, pattern: kept ?? pattern }]),
);

/** Where subschemas sit: a keyword holding one schema, an array of them, or a map of them. */
const ONE = ["items", "additionalProperties"];
const MAP = ["properties", "$defs", "definitions"];

/**
 * `schema` (a JSON Schema, parsed) as XGrammar should get it: throws an InvalidOptionError naming the JSON path of a
 * keyword XGrammar would ignore; returns a copy with number ranges and integer exclusive bounds rewritten. A number
 * range XGrammar cannot keep in any schema form (exclusive, negative or fractional bounds) is refused here: see
 * checkJsonSchemaNumbers, which supports them through EBNF.
 */
export function checkJsonSchema(schema: unknown, field: string): unknown {
  return new Walker(schema, field, null).walk(schema, field);
}

/**
 * checkJsonSchema, with every number range supported: a range XGrammar would get wrong in any schema form is a
 * placeholder const (NUMBER_PLACEHOLDER_BASE + i) in the schema, and `numbers[i]` the EBNF expression of its texts
 * (numberRange.ts), to put in the grammar's EBNF in its place (substituteNumbers).
 */
export function checkJsonSchemaNumbers(schema: unknown, field: string): { schema: unknown; numbers: string[] } {
  const numbers: string[] = [];
  const out = new Walker(schema, field, numbers).walk(schema, field);
  // A placeholder must be a literal no schema writes: the base's digits may not occur in it.
  if (numbers.length > 0 && JSON.stringify(schema).includes(String(NUMBER_PLACEHOLDER_BASE).slice(0, 10)))
    throw new InvalidOptionError(`${field} holds the digits ${NUMBER_PLACEHOLDER_BASE}, which the engine reserves`, {
      field,
    });
  return { schema: out, numbers };
}

class Walker {
  constructor(
    private readonly root: unknown,
    private readonly field: string,
    /** Where number ranges go as EBNF; null: refused as XGrammar would get them wrong. */
    private readonly numbers: string[] | null,
  ) {}

  walk(node: unknown, path: string): unknown {
    if (node === true) return node;
    if (node === false) this.refuse(path, "is false: no value can match it");
    if (node === null || typeof node !== "object" || Array.isArray(node))
      this.refuse(path, "is not a schema (expected an object or a boolean)");
    let s = this.normalize(node as Json, path);
    for (const key of Object.keys(s)) if (Object.hasOwn(REFUSED, key)) this.refuse(`${path}.${key}`, REFUSED[key]);
    // JSON Schema's keywords that constrain values (a keyword it does not define, as OpenAPI's `discriminator` beside
    // a oneOf, constrains nothing: validators ignore it).
    const assertions = Object.keys(s).filter((k) => ASSERTIONS.has(k));

    if (s.$ref !== undefined) {
      this.checkRef(s.$ref, `${path}.$ref`);
      const sibling = assertions.find((k) => k !== "$ref");
      if (sibling !== undefined)
        this.refuse(`${path}.${sibling}`, "sits next to $ref, which XGrammar follows alone; move it into the target");
    }
    for (const combinator of ["anyOf", "oneOf"] as const) {
      if (s[combinator] === undefined) continue;
      const sibling = assertions.find((k) => k !== combinator);
      if (sibling !== undefined)
        this.refuse(
          `${path}.${sibling}`,
          `sits next to ${combinator}, which XGrammar reads alone; move it into each branch`,
        );
    }
    if (s.allOf !== undefined) {
      if (!Array.isArray(s.allOf) || s.allOf.length !== 1)
        this.refuse(`${path}.allOf`, "XGrammar keeps only one member of allOf; merge the members into one schema");
      const sibling = assertions.find((k) => k !== "allOf");
      if (sibling !== undefined)
        this.refuse(`${path}.${sibling}`, "sits next to allOf, which XGrammar reads alone; merge them into one schema");
    }
    for (const finite of ["enum", "const"] as const) {
      if (s[finite] === undefined) continue;
      const sibling = assertions.find((k) => k !== finite && k !== "type");
      if (sibling !== undefined)
        this.refuse(
          `${path}.${sibling}`,
          `sits next to ${finite}, which XGrammar reads alone (the values are the schema)`,
        );
      if (s.type !== undefined) {
        const values = finite === "const" ? [s.const] : Array.isArray(s.enum) ? s.enum : [];
        const bad = values.find((v) => !typeList(s.type).some((t) => isOfType(v, t)));
        if (bad !== undefined)
          this.refuse(
            `${path}.${finite}`,
            `holds ${JSON.stringify(bad)}, which is not of its type ${JSON.stringify(s.type)}`,
          );
      }
    }

    const types = s.type === undefined ? null : typeList(s.type);
    for (const key of assertions) {
      if (!Object.hasOwn(TYPED, key)) continue;
      const wants = TYPED[key];
      if (types === null)
        this.refuse(
          `${path}.${key}`,
          `needs a "type" beside it (XGrammar reads ${key} only in a schema of type ${wants})`,
        );
      if (types.length > 1)
        this.refuse(
          `${path}.${key}`,
          `sits in a schema of several types, whose keywords XGrammar ignores; use anyOf with one type per branch`,
        );
    }
    if (types !== null && types.length === 1) {
      const t = types[0];
      if (t === "string") {
        this.checkString(s, path);
        s = this.formatAsPattern(s, path);
      }
      if (t === "integer" || t === "number") this.checkBoundsAreNumbers(s, path);
    }
    if (s.oneOf !== undefined) this.checkOneOf(s.oneOf, `${path}.oneOf`);

    const out: Json = { ...s };
    for (const key of ONE) if (key in s && typeof s[key] !== "boolean") out[key] = this.walk(s[key], `${path}.${key}`);
    for (const key of MAP) {
      const m = s[key];
      if (m === null || typeof m !== "object" || Array.isArray(m)) continue;
      out[key] = Object.fromEntries(Object.entries(m).map(([k, v]) => [k, this.walk(v, `${path}.${key}${member(k)}`)]));
    }
    for (const key of ["anyOf", "oneOf", "allOf", "prefixItems"]) {
      const list = s[key];
      if (Array.isArray(list)) out[key] = list.map((v, i) => this.walk(v, `${path}.${key}[${i}]`));
    }
    if (types !== null && types.length === 1 && types[0] === "string" && s.format === undefined) {
      const merged = lengthPattern(out);
      if (merged !== null) {
        if (merged.min > merged.max)
          this.refuse(
            `${path}.${s.maxLength !== undefined ? "maxLength" : "minLength"}`,
            `leaves no string: the pattern and the lengths need at least ${merged.min} and at most ${merged.max} characters`,
          );
        const { minLength: _a, maxLength: _b, ...rest } = out;
        return { ...rest, pattern: `^${merged.atom}{${merged.min},${merged.max === Infinity ? "" : merged.max}}$` };
      }
    }
    if (types !== null && types.length === 1 && types[0] === "integer") return integerBounds(out);
    if (types !== null && types.length === 1 && types[0] === "number") return this.numberBounds(out, path);
    return out;
  }

  private checkString(s: Json, path: string): void {
    if (s.format !== undefined && (typeof s.format !== "string" || !FORMATS.has(s.format)))
      this.refuse(
        `${path}.format`,
        `is ${JSON.stringify(s.format)}, which XGrammar does not enforce; supported: ${[...FORMATS].join(", ")} (or give a pattern)`,
      );
    const shaped = s.pattern !== undefined ? "pattern" : s.format !== undefined ? "format" : null;
    if (shaped === "pattern" && s.format === undefined && lengthPattern(s) !== null) return; // rewritten (walk)
    if (shaped !== null)
      for (const k of ["minLength", "maxLength", "pattern"])
        if (k !== shaped && s[k] !== undefined)
          this.refuse(
            `${path}.${k}`,
            shaped === "pattern"
              ? "sits next to pattern, which XGrammar reads alone; put the length in the pattern (a pattern that repeats one character class, as ^[a-z]+$, takes minLength / maxLength)"
              : `sits next to format, which XGrammar reads alone; use a pattern with the length in it`,
          );
  }

  /**
   * What validators read the same way, in the form XGrammar reads right: a draft-7 tuple (`items` as an array, with
   * `additionalItems`: the AI SDK's zod converter writes it) as prefixItems + items; `propertyNames: {type: "string"}`
   * (zod's record: every JSON property name is a string) dropped; each `required` name missing from `properties` added
   * to it (XGrammar ignores such a name: {} answered {"properties": {}, "required": ["zz"]}) with the schema extra
   * properties have, refused where `additionalProperties: false` leaves the object no way to hold it. A property name
   * with a quote, a backslash or a control character is refused (XGrammar writes it into its grammar unescaped).
   */
  private normalize(s: Json, path: string): Json {
    const out = { ...s };
    if (Array.isArray(out.items)) {
      out.prefixItems = out.items;
      if (out.additionalItems === undefined) delete out.items;
      else out.items = out.additionalItems;
      delete out.additionalItems;
    }
    if (isObject(out.propertyNames) && Object.keys(out.propertyNames).every((k) => k === "type" || ANNOTATIONS.has(k)))
      if (out.propertyNames.type === "string") delete out.propertyNames;
    const names = isObject(out.properties) ? Object.keys(out.properties) : [];
    for (const name of names)
      if (/["\\\u0000-\u001f]/.test(name))
        this.refuse(
          `${path}.properties${member(name)}`,
          "is a property name with a quote, a backslash or a control character, which XGrammar cannot write into its grammar; rename the property",
        );
    if (Array.isArray(out.required)) {
      const missing = out.required.filter((r): r is string => typeof r === "string" && !names.includes(r));
      if (missing.length > 0) {
        if (out.additionalProperties === false)
          this.refuse(
            `${path}.required`,
            `names ${JSON.stringify(missing[0])}, which is not in properties while additionalProperties is false: no object can match; add it to properties`,
          );
        const extra = out.additionalProperties === undefined ? true : out.additionalProperties;
        out.properties = {
          ...(isObject(out.properties) ? out.properties : {}),
          ...Object.fromEntries(missing.map((m) => [m, extra])),
        };
        for (const m of missing)
          if (/["\\\u0000-\u001f]/.test(m))
            this.refuse(
              `${path}.required`,
              `names ${JSON.stringify(m)}, a property name with a quote, a backslash or a control character, which XGrammar cannot write into its grammar; rename the property`,
            );
      }
    }
    return out;
  }

  /**
   * A string's `format` as XGrammar should get it. Beside a `pattern` (zod 4's .datetime(), .uuid(), .email() write
   * both; XGrammar reads only the format): a pattern known to imply the format (zod's own, FORMAT_IMPLYING) replaces
   * both, any other pairing is refused. Alone: a format XGrammar writes too loosely is replaced by an exact (or
   * stricter) pattern (FORMAT_PATTERNS), or refused (FORMAT_REFUSED).
   */
  private formatAsPattern(s: Json, path: string): Json {
    if (typeof s.format !== "string") return s;
    const { format, ...rest } = s;
    if (s.pattern !== undefined) {
      const implied = typeof s.pattern === "string" ? FORMAT_IMPLYING[s.pattern] : undefined;
      if (implied === undefined || implied.format !== format)
        this.refuse(
          `${path}.pattern`,
          `sits next to format ${JSON.stringify(format)}, which XGrammar reads alone; give one of them (zod's own patterns for date, date-time, uuid, email, ipv4 and ipv6 are supported beside their format)`,
        );
      return { ...rest, pattern: implied.pattern };
    }
    if (Object.hasOwn(FORMAT_REFUSED, format)) this.refuse(`${path}.format`, FORMAT_REFUSED[format]);
    if (Object.hasOwn(FORMAT_PATTERNS, format)) return { ...rest, pattern: FORMAT_PATTERNS[format] };
    return s;
  }

  private checkBoundsAreNumbers(s: Json, path: string): void {
    for (const k of ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"])
      if (s[k] !== undefined && (typeof s[k] !== "number" || !Number.isFinite(s[k])))
        this.refuse(`${path}.${k}`, `is ${JSON.stringify(s[k])}; expected a finite number`);
  }

  /**
   * A number's bounds as XGrammar keeps them. Two-sided, it lets any fraction follow the upper bound's integer part
   * (and the lower bound's, below 0); a lone minimum above 0 admits every non-negative number; fractional and
   * exclusive bounds are not kept. So: a lone maximum >= 0 passes; a range 0 <= minimum < maximum of integers (a lone
   * minimum: maximum MAX_SAFE_INTEGER) is rewritten as anyOf [minimum, maximum - 1] (whose free fraction stays below
   * maximum) and maximum itself. Any other range (exclusive, negative or fractional bounds: zod's positive(), gt(),
   * negative()) becomes a placeholder whose texts numberRange.ts writes as EBNF, or, where EBNF cannot go (a structural
   * tag's schemas), is refused.
   */
  private numberBounds(s: Json, path: string): Json {
    const lo = tighter(s.minimum, s.exclusiveMinimum, 1);
    const hi = tighter(s.maximum, s.exclusiveMaximum, -1);
    if (lo !== null && hi !== null && (lo.value > hi.value || (lo.value === hi.value && (lo.strict || hi.strict))))
      this.refuse(`${path}.${lo.key}`, `is ${lo.value}, and ${hi.key} ${hi.value}: no number fits`);
    const { minimum: _a, maximum: _b, exclusiveMinimum: _c, exclusiveMaximum: _d, type: _t, ...rest } = s;
    const integral = (b: typeof lo) => b === null || (!b.strict && Number.isInteger(b.value));
    if (integral(lo) && integral(hi)) {
      if (lo === null && (hi === null || hi.value >= 0)) return s;
      if (lo !== null && lo.value >= 0) {
        const top = hi?.value ?? Number.MAX_SAFE_INTEGER;
        if (lo.value === top) return { ...rest, const: lo.value };
        return { ...rest, anyOf: [{ type: "number", minimum: lo.value, maximum: top - 1 }, { const: top }] };
      }
    }
    if (this.numbers === null) {
      const at = lo !== null && (lo.strict || !Number.isInteger(lo.value) || lo.value < 0) ? lo : hi!;
      this.refuse(
        `${path}.${at.key}`,
        `is ${at.value}: XGrammar keeps a number's range only with integer, inclusive bounds from 0 up in a structural tag; use type integer, or give the schema as a json_schema format`,
      );
    }
    const expr = numberRangeEbnf(lo, hi);
    if (expr === null) this.refuse(`${path}.${(lo ?? hi)!.key}`, "leaves no number");
    this.numbers.push(expr);
    return { ...rest, const: NUMBER_PLACEHOLDER_BASE + this.numbers.length - 1 };
  }

  /** oneOf is compiled as anyOf: kept when no value can match two branches. */
  private checkOneOf(list: unknown, path: string): void {
    if (!Array.isArray(list) || list.length === 0) this.refuse(path, "is not a non-empty array of schemas");
    const arms = list.map((a) => this.resolve(a));
    const refuseOverlap = (): never =>
      this.refuse(
        path,
        "has branches a value could match at once (XGrammar compiles oneOf as anyOf); use anyOf, or make the branches disjoint (distinct types, consts, or a required property with a distinct const)",
      );
    // Distinct finite values or distinct primitive types.
    const kinds = arms.map(armKind);
    if (kinds.every((k) => k !== null)) {
      for (let i = 0; i < kinds.length; i++)
        for (let j = i + 1; j < kinds.length; j++) if (kindsOverlap(kinds[i]!, kinds[j]!)) refuseOverlap();
      return;
    }
    // Objects told apart by a required property holding a distinct const (a discriminated union).
    const tags = arms.map((a) => discriminators(a));
    if (tags.some((t) => t === null)) refuseOverlap();
    const shared = [...tags[0]!.keys()].filter((k) => tags.every((t) => t!.has(k)));
    const distinct = shared.some((k) => {
      const seen = tags.map((t) => JSON.stringify(t!.get(k)));
      return new Set(seen).size === seen.length;
    });
    if (!distinct) refuseOverlap();
  }

  private resolve(node: unknown): unknown {
    for (let hops = 0; hops < 32 && isObject(node) && typeof node.$ref === "string"; hops++)
      node = this.target(node.$ref);
    return node;
  }

  private checkRef(ref: unknown, path: string): void {
    if (typeof ref !== "string") this.refuse(path, "is not a string");
    if (ref !== "#" && !ref.startsWith("#/"))
      this.refuse(path, `is ${JSON.stringify(ref)}: XGrammar follows only references inside the schema (# or #/...)`);
    if (this.target(ref) === undefined)
      this.refuse(path, `is ${JSON.stringify(ref)}, which points at nothing in the schema`);
  }

  private target(ref: string): unknown {
    if (ref === "#") return this.root;
    let node: unknown = this.root;
    for (const raw of ref.slice(2).split("/")) {
      const key = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~");
      if (!isObject(node) && !Array.isArray(node)) return undefined;
      node = (node as Record<string, unknown>)[key];
    }
    return node;
  }

  private refuse(path: string, why: string): never {
    throw new InvalidOptionError(`${path} ${why}`, { field: path });
  }
}

/**
 * The tighter of an inclusive and an exclusive bound (sign 1: lower bounds, -1: upper), with the keyword it came from.
 */
function tighter(
  inclusive: unknown,
  exclusive: unknown,
  sign: 1 | -1,
): { value: number; strict: boolean; key: string } | null {
  const inc = typeof inclusive === "number" ? inclusive : null;
  const exc = typeof exclusive === "number" ? exclusive : null;
  const incKey = sign === 1 ? "minimum" : "maximum";
  const excKey = sign === 1 ? "exclusiveMinimum" : "exclusiveMaximum";
  if (exc !== null && (inc === null || sign * exc >= sign * inc)) return { value: exc, strict: true, key: excKey };
  if (inc !== null) return { value: inc, strict: false, key: incKey };
  return null;
}

/**
 * A pattern that repeats one character class (`^[a-z]+$`, `[0-9]{2,8}`, `^\\d*$`; anchors optional: XGrammar matches
 * a pattern against the whole string) beside minLength / maxLength, as one bounded repetition: the class, and the
 * tighter of each pair of bounds. Each repetition is one character, as JSON Schema counts a length (code points).
 * null: no length beside the pattern, or a pattern of another shape (those are refused).
 */
function lengthPattern(s: Json): { atom: string; min: number; max: number } | null {
  if (s.minLength === undefined && s.maxLength === undefined) return null;
  if (typeof s.pattern !== "string") return null;
  const m = /^\^?(\[\^?(?:[^\]\\[]|\\[^dDwWsSbBpPuUx0-9])+\]|\\[dw])(\+|\*|\{(\d+)(,(\d*))?\})\$?$/.exec(s.pattern);
  if (m === null) return null;
  const [, atom, q, qMin, comma, qMax] = m;
  const min = q === "+" ? 1 : q === "*" ? 0 : Number(qMin);
  const max = q === "+" || q === "*" ? Infinity : comma === undefined ? min : qMax === "" ? Infinity : Number(qMax);
  const length = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v) && v >= 0;
  if ((s.minLength !== undefined && !length(s.minLength)) || (s.maxLength !== undefined && !length(s.maxLength)))
    return null; // XGrammar's own check names it
  const lo = (s.minLength as number | undefined) ?? 0;
  const hi = (s.maxLength as number | undefined) ?? Infinity;
  return { atom, min: Math.max(min, lo), max: Math.min(max, hi) };
}

/**
 * An integer's bounds as XGrammar keeps them: inclusive (its lone exclusiveMinimum is ignored) and two-sided (a lone
 * minimum above 0 admits every non-negative integer, a lone negative maximum every non-positive one), the missing side
 * at +-Number.MAX_SAFE_INTEGER. No bound: left as it is.
 */
function integerBounds(s: Json): Json {
  const out = { ...s };
  let lo = typeof out.minimum === "number" ? Math.ceil(out.minimum) : undefined;
  let hi = typeof out.maximum === "number" ? Math.floor(out.maximum) : undefined;
  if (typeof out.exclusiveMinimum === "number") {
    const x = Math.floor(out.exclusiveMinimum) + 1;
    lo = lo === undefined ? x : Math.max(lo, x);
  }
  if (typeof out.exclusiveMaximum === "number") {
    const x = Math.ceil(out.exclusiveMaximum) - 1;
    hi = hi === undefined ? x : Math.min(hi, x);
  }
  delete out.exclusiveMinimum;
  delete out.exclusiveMaximum;
  if (lo === undefined && hi === undefined) return out;
  out.minimum = Math.max(lo ?? -Number.MAX_SAFE_INTEGER, -Number.MAX_SAFE_INTEGER);
  out.maximum = Math.min(hi ?? Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER);
  return out;
}

type ArmKind = { values: unknown[] } | { types: string[] };

/** A oneOf branch as a set of finite values or of primitive types; null when neither. */
function armKind(arm: unknown): ArmKind | null {
  if (!isObject(arm)) return null;
  if ("const" in arm) return { values: [arm.const] };
  if (Array.isArray(arm.enum)) return { values: arm.enum };
  if (arm.type === undefined) return null;
  const types = typeList(arm.type);
  if (types.includes("object") || types.includes("array")) return null;
  return { types };
}

function kindsOverlap(a: ArmKind, b: ArmKind): boolean {
  if ("values" in a && "values" in b)
    return a.values.some((x) => b.values.some((y) => JSON.stringify(x) === JSON.stringify(y)));
  if ("types" in a && "types" in b) return a.types.some((x) => b.types.some((y) => typesOverlap(x, y)));
  const values = "values" in a ? a.values : (b as { values: unknown[] }).values;
  const types = "types" in a ? a.types : (b as { types: string[] }).types;
  return values.some((v) => types.some((t) => isOfType(v, t)));
}

function typesOverlap(a: string, b: string): boolean {
  const numeric = (t: string) => t === "integer" || t === "number";
  return a === b || (numeric(a) && numeric(b));
}

/** An object branch's required properties that hold one const value (property -> value); null if not an object. */
function discriminators(arm: unknown): Map<string, unknown> | null {
  if (!isObject(arm) || !isObject(arm.properties)) return null;
  const required = Array.isArray(arm.required) ? arm.required : [];
  const out = new Map<string, unknown>();
  for (const [k, v] of Object.entries(arm.properties)) {
    if (!required.includes(k) || !isObject(v)) continue;
    if ("const" in v) out.set(k, v.const);
    else if (Array.isArray(v.enum) && v.enum.length === 1) out.set(k, v.enum[0]);
  }
  return out;
}

function typeList(type: unknown): string[] {
  return Array.isArray(type) ? type.map(String) : [String(type)];
}

function isOfType(v: unknown, t: string): boolean {
  switch (t) {
    case "null":
      return v === null;
    case "boolean":
      return typeof v === "boolean";
    case "string":
      return typeof v === "string";
    case "integer":
      return Number.isInteger(v);
    case "number":
      return typeof v === "number";
    case "array":
      return Array.isArray(v);
    case "object":
      return isObject(v);
    default:
      return false;
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/**
 * A structural tag with each JSON Schema in it (`{"type": "json_schema", "json_schema": {...}}` anywhere) checked and
 * rewritten by checkJsonSchema, named by its path under `field`.
 */
export function checkStructuralTagSchemas(tag: unknown, field: string): unknown {
  if (Array.isArray(tag)) return tag.map((v, i) => checkStructuralTagSchemas(v, `${field}[${i}]`));
  if (!isObject(tag)) return tag;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(tag))
    out[k] =
      k === "json_schema" && tag.type === "json_schema" && typeof v !== "string"
        ? checkJsonSchema(v, `${field}.json_schema`)
        : checkStructuralTagSchemas(v, `${field}${member(k)}`);
  return out;
}

/** A property name as a path segment: `.name` when it reads as one, else `["..."]`. */
function member(key: string): string {
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
}

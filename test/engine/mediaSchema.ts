// The jump-forward tests' JSON schema: enums, a bounded integer and a bounded array, so most of an answer's tokens
// are forced (one allowed token) and a few are sampled. One copy for structured.jumpForward{,.edges}.test.ts.
export const MEDIA_SCHEMA = {
  type: "object",
  properties: {
    kind: { type: "string", enum: ["book", "film", "album", "game"] },
    year: { type: "integer", minimum: 1900, maximum: 2030 },
    tags: { type: "array", items: { type: "string", enum: ["classic", "new", "award"] }, minItems: 1, maxItems: 3 },
  },
  required: ["kind", "year", "tags"],
  additionalProperties: false,
} as const;

/** The same with a nullable short string (an anyOf branch to choose). */
export const MEDIA_SCHEMA_WITH_NOTE = {
  ...MEDIA_SCHEMA,
  properties: { ...MEDIA_SCHEMA.properties, note: { anyOf: [{ type: "string", maxLength: 8 }, { type: "null" }] } },
  required: [...MEDIA_SCHEMA.required, "note"],
} as const;

// Tool parameter schemas the server's tool-call tests share (tools.test.ts, jumpForward.test.ts).
export const WEATHER = {
  type: "object",
  properties: {
    city: { type: "string", enum: ["Paris", "Rome", "Oslo"] },
    days: { type: "integer", minimum: 1, maximum: 7 },
    unit: { type: ["string", "null"], enum: ["celsius", "fahrenheit", null] },
  },
  required: ["city", "days", "unit"],
  additionalProperties: false,
} as const;

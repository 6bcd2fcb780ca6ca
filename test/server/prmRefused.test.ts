// A process reward model (a score head, no text) given to `serve` is refused with an error naming what to do, and the
// server answers its requests with that error instead of serving scores as text.
import { describe, expect, it } from "vitest";
import { fixtureDir } from "../model/fixtureCache.js";
import { startBundledServer } from "../helpers/bundledServer.js";

describe("serve refuses a PRM as its model", () => {
  it("a value-head PRM fails to load as the served model, naming --prm", async () => {
    const dir = await fixtureDir("qwen2", "f32", { prmHead: "value", seed: 11 });
    await expect(startBundledServer({ modelDir: dir, bundledDir: undefined })).rejects.toThrow(
      /process reward model .* cannot be served; .*--prm DIR/,
    );
  }, 120_000);
});

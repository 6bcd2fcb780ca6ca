// loadModel() with no folder loads the bundled tiny reasoner from the package, whatever the working directory; a
// folder that is not there is named absolutely, with the working directory it was resolved against.
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { bundledModelDir, loadModel } from "../../ts/index.js";

describe("the bundled model", () => {
  it("loadModel() loads models/tiny-reasoner of the package", async () => {
    const model = await loadModel();
    try {
      expect(resolve(model.dir)).toBe(resolve(bundledModelDir));
      expect(model.config.numLayers).toBe(4);
    } finally {
      model.dispose();
    }
  });

  it("a relative path that is not there names the absolute path, the cwd and, for the bundled one, the fix", async () => {
    await expect(loadModel("nowhere/model")).rejects.toThrow(
      `${resolve("nowhere/model")}: model folder not found (nowhere/model resolved against ${process.cwd()})`,
    );
    await expect(loadModel("somewhere/models/tiny-reasoner")).rejects.toThrow(
      /call loadModel\(\) with no folder \(or pass bundledModelDir\)/,
    );
  });
});

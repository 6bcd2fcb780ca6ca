import { copyFileSync, mkdirSync, mkdtempSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { packageRoot, prebuildPath } from "../../ts/native/loadAddon.js";

describe("addon loader", () => {
  it("finds a prebuild for this platform, which loads like the local build", () => {
    const root = mkdtempSync(path.join(tmpdir(), "prebuild-"));
    expect(prebuildPath(root)).toBeUndefined();
    const dir = path.join(root, "prebuilds", `${process.platform}-${process.arch}`);
    mkdirSync(dir, { recursive: true });
    copyFileSync(path.join(packageRoot(), "build", "Release", "deliberate.node"), path.join(dir, "deliberate.node"));
    const found = prebuildPath(root);
    expect(found).toBe(path.join(dir, "deliberate.node"));
    const addon = createRequire(import.meta.url)(found!) as { listDevices(): { cpu: { threads: number } } };
    expect(addon.listDevices().cpu.threads).toBeGreaterThan(0);
  });
});

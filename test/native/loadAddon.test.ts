import { copyFileSync, mkdirSync, mkdtempSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it, vi } from "vitest";
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

  it("loads DELIBERATE_ADDON_PATH's file over any build, and names the variable when it cannot", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "addon-path-"));
    const copy = path.join(dir, "other.node");
    copyFileSync(path.join(packageRoot(), "build", "Release", "deliberate.node"), copy);
    const before = process.env.DELIBERATE_ADDON_PATH;
    const fresh = async (value: string): Promise<typeof import("../../ts/native/loadAddon.js")> => {
      process.env.DELIBERATE_ADDON_PATH = value;
      vi.resetModules(); // the loader caches the addon per module instance
      return import("../../ts/native/loadAddon.js");
    };
    try {
      expect((await fresh(copy)).loadAddon().listDevices().cpu.threads).toBeGreaterThan(0);
      const missing = path.join(dir, "missing.node");
      expect((await fresh(missing)).loadAddon).toThrow(
        `DELIBERATE_ADDON_PATH is ${missing}, and the addon could not be loaded from ${missing} (`,
      );
    } finally {
      if (before === undefined) delete process.env.DELIBERATE_ADDON_PATH;
      else process.env.DELIBERATE_ADDON_PATH = before;
      vi.resetModules();
    }
  });
});

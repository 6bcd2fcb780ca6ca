// A child process (`node -e`, CommonJS) loads the addon this test process loads: DELIBERATE_ADDON_PATH's file when it
// is set (the sanitized build of scripts/asan/run.sh), else the package's build through node-gyp-build.
import path from "node:path";
import { packageRoot } from "../../ts/native/loadAddon.js";

/** A CommonJS expression that evaluates to the addon, for a `node -e` script. */
export function childAddonExpr(): string {
  const override = process.env.DELIBERATE_ADDON_PATH;
  if (override) return `require(${JSON.stringify(path.resolve(override))})`;
  const root = packageRoot();
  return `require(${JSON.stringify(path.join(root, "node_modules", "node-gyp-build"))})(${JSON.stringify(root)})`;
}

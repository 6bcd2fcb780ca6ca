// The one public entry: named exports only.
export { listDevices, formatDevices } from "./device/devices.js";
export type { DeviceReport } from "./device/devices.js";
export { loadAddon } from "./native/loadAddon.js";
export type { Addon, DType, DeviceKind, NativeOps, NativeTensor } from "./native/addonTypes.js";
export * from "./programs/index.js";

// A full garbage collection before a memory reading, without asking the caller for `node --expose-gc` (the soaks).
import v8 from "node:v8";
import vm from "node:vm";

v8.setFlagsFromString("--expose-gc");
export const collectGarbage = vm.runInNewContext("gc") as () => void;

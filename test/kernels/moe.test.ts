// The mixture-of-experts op on the CPU against the float64 reference (moeSuite.ts).
import { moeSuite } from "./moeSuite.js";

moeSuite("cpu", 46);

// maskLogits on the CPU against the plain rule (maskLogitsSuite.ts).
import { maskLogitsSuite } from "./maskLogitsSuite.js";

maskLogitsSuite("cpu", 44);

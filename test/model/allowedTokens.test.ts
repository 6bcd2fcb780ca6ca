// Constrained decoding (allowedTokens) in the CPU forward, f32 fixture: allowedTokensSuite.ts.
import { allowedTokensSuite } from "./allowedTokensSuite.js";

allowedTokensSuite("cpu", "f32");

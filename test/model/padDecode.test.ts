// Decode steps padded to batch-size buckets, on the CPU backend (the suite: padDecodeSuite.ts).
import { padDecodeSuite } from "./padDecodeSuite.js";

padDecodeSuite((process.env.DELIBERATE_TEST_DEVICE ?? "cpu") as "cpu" | "cuda", "f32");

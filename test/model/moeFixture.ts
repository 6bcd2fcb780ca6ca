// The Qwen3-MoE fixture of the MoE tests: 8 experts, 2 per token, moe_intermediate_size 64, layer 0 dense
// (mlp_only_layers [0]) before two mixtures (make-fixture's qwen3moe defaults over three layers).
export const MOE_EXTRA = { layers: 3 } as const;

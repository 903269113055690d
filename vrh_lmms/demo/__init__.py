"""The shipped tiny grounding VLM: its data spec, trainer, design and the `vrh-lmms demo` pipeline.

`spec` fixes what the model sees and says (scene config, image size, prompt, answer format); `data` builds exactly
the inputs lmms-eval's `qwen2_5_vl` backend builds; `train` trains the model (with `head_prune` and `run_state`) on
the design in `designs`; `evaluation` measures held-out grounding, with heads ablated or not (`model_heads`);
`stages`, `pipeline`, `transfer` and `kcurve` are `vrh-lmms demo`. The research behind the design (designs p1-p20,
probes, the causal protocol) is the repository's top-level research/ folder, not part of the package.
"""

"""`vrh-lmms demo`: discovery, the ablation sweep, the report and the recall step on the shipped tiny grounding VLM.

`stages`, `pipeline`, `transfer`, `recall` and `kcurve` are the command; `model_heads` reads the shipped model's
heads. The model's data spec is `vrh_lmms.base.synth.demo_spec`; how the model was trained (trainer, design p21, head
pruning) is the repository's research/demo_model, not part of the package.
"""

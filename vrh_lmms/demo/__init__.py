"""The shipped tiny grounding VLM: its data spec, trainer and research probe.

`spec` fixes what the model sees and says (scene config, image size, prompt, answer format); `data` builds exactly
the inputs lmms-eval's `qwen2_5_vl` backend builds; `train` trains the model; `probe` measures baseline, head
scores and head ablations on held-out scenes.
"""

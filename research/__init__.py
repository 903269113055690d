"""Research on the demo model, kept out of the installed package: the designs that did not ship (p1-p20), the head
lasso, the probes and the causal protocol behind docs/demo-model-experiments.md.

Everything here builds on `vrh_lmms` (the trainer, the held-out evaluation, the k-curve); nothing in `vrh_lmms`
imports it. Run its entry points from the repository root, e.g. `python -m research.train --design p11 --out DIR`.
"""

"""How the shipped demo model was made: its trainer, its design (p21), head pruning and the training-time held-out
evaluation. Kept out of the installed package; `vrh-lmms train-tiny` calls it from a clone of the repository."""

"""Helpers the tests share: sample files written as `vrh-lmms sweep` writes them, and driving an
lmms-eval backend on scene docs."""

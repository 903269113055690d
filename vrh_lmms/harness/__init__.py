"""The harness: the only code that imports lmms-eval (with the mapped vrh_lmms.model_wrappers and vrh_lmms.tasks).
"""

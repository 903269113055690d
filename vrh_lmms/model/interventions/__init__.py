"""Intervention mechanics inside the attention and o_proj calls (torch only); the runs that drive them through
lmms-eval are vrh_lmms.runs.interventions.
"""

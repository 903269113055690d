"""The KV-cache policy (which keys stay) and its application inside attention; the lmms-eval runs are
vrh_lmms.runs.kvcache.
"""

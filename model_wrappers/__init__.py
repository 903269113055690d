"""lmms-eval model registrations (`vrh_*` model names), installed as `vrh_lmms.model_wrappers`."""

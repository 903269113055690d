"""vrh-lmms: find the Visual Retrieval Heads of vision-language models and test what they do (lmms-eval plugin)."""

__version__ = "0.1.0"

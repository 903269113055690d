"""The harness: the only code that imports lmms-eval (with the mapped vrh_lmms.model_wrappers and vrh_lmms.tasks).
"""

from vrh_lmms.harness import lmms_quirks  # noqa: F401  (reads PIL's truncated-image flag before lmms-eval sets it)
from vrh_lmms.harness.deferred import defer_unused

# before anything here imports lmms-eval: modules it imports and our commands never use load on first use instead
defer_unused()

"""User-facing errors: each names the bad part of the input and is shown as one line, not a traceback."""


class VRHError(Exception):
    """Bad input or a refused operation; the CLI prints `vrh-lmms: error: <message>` and exits 2."""

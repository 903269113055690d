"""Head references, head-set specs and heads files."""

from vrh_lmms.base.heads.geometry import Geometry, HeadRef, format_heads, parse_head
from vrh_lmms.base.heads.spec import HeadSet, resolve_spec

__all__ = ["Geometry", "HeadRef", "HeadSet", "format_heads", "parse_head", "resolve_spec"]

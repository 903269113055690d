"""The box conventions the family registry knows, as one table derived from it (`CONVENTIONS`), and lookup by name.

Kept apart from the conventions themselves (vrh_lmms.base.boxes.conventions), which the registry's records point to: the
registry imports those, this table reads the registry, so neither needs the other late.
"""

from __future__ import annotations

from vrh_lmms.base.boxes.conventions import GENERIC, Convention
from vrh_lmms.base.families import FAMILIES
from vrh_lmms.base.tables import DerivedTable, unknown_name


def _conventions() -> dict[str, Convention]:
    rows = {GENERIC.name: GENERIC}
    for fam in FAMILIES.values():
        rows.setdefault(fam.convention.name, fam.convention)
    return dict(sorted(rows.items()))


CONVENTIONS: DerivedTable[Convention] = DerivedTable(_conventions, "box convention")


def get_convention(name: str) -> Convention:
    """The convention called ``name``; a clear error lists the known ones."""
    rows = _conventions()
    if name not in rows:
        raise ValueError(unknown_name("box convention", name, rows))
    return rows[name]

"""A dataclass copy without re-running its checks, for the hot loops that derive many objects from one checked one.

The uncertainty report builds ~1,200 drawn profiles per view (plan.intervals): each a Profile, a LatencyModel and two
forwards, scaled copies of checked objects. dataclasses.replace re-ran every __post_init__ check on each, about a
third of the report's time; the values it checks cannot leave their ranges (a forward scaled by a finite factor
> 0, interference draws >= 0), so these copies skip them. Caches an instance keeps in its __dict__ are not copied,
so a class whose __post_init__ builds state from its fields (model.table.MeasuredForward) must not be copied so.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T")
_NAMES: dict[type, tuple[str, ...]] = {}


def unchecked_replace(obj: T, **changes: Any) -> T:
    """dataclasses.replace(obj, **changes) without __post_init__ (see the module docstring): use it only where the
    changed values keep the invariants obj's checks enforce."""
    cls = type(obj)
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in fields(cls))
    unknown = set(changes) - set(names)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {sorted(unknown)[0]!r}")
    new = object.__new__(cls)
    new.__dict__.update({n: changes[n] if n in changes else obj.__dict__[n] for n in names})
    return new

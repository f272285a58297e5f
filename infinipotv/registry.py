"""The one registry of the harness: policies, benchmarks and model families are each a :class:`Registry`.

A name maps to one class. Registering a name twice is an error, never a silent overwrite: a second class under a
name would make ``compress=``, ``benchmark=`` or ``model.family=`` run other code than the config names.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T", bound=type)


class Registry(dict[str, T]):
    """``name -> class`` for one kind of component (``kind`` names it in errors)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def add(self, name: str, cls: T) -> T:
        """Register ``cls`` as ``name``; returns it, so that a class decorator can end with ``return add(...)``."""
        if name in self:
            raise ValueError(f"{self.kind} {name!r} is registered twice: {_where(self[name])} and {_where(cls)}")
        self[name] = cls
        return cls


def _where(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"

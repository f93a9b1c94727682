"""A value worked out on first use and kept on the instance: :func:`functools.cached_property`
without its lock.

Python 3.11's ``cached_property`` takes a lock on every first access; the planner reads a few
such values per node (a node's labels as a mapping, its units), 65,000 nodes in a large cluster,
where the lock costs more than the value. Without it two threads may both work a value out the
first time; they get equal values, each stored whole, so nothing reads a half-made one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class once(Generic[T]):
    """Works on frozen dataclasses (it writes the instance's ``__dict__``, not its attribute)."""

    def __init__(self, func: Callable[[Any], T]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> once[T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> T | once[T]:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.func(obj)
        return value

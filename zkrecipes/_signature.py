"""Constructor errors that name the public class called, not the internal base whose ``__init__`` it
inherits (``FairLock(zk, p, hots="a")`` -> ``FairLock() got an unexpected keyword argument 'hots'``)."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable


def public_name(cls: type) -> str:
    """``FairLock``, or ``aio.FairLock`` for a class of :mod:`zkrecipes.aio`."""
    return ("aio." if cls.__module__.startswith("zkrecipes.aio") else "") + cls.__qualname__


class NamedInit:
    """Every subclass gets a thin wrapper of its ``__init__`` (its own or the one it inherits): a call
    whose arguments do not fit raises TypeError naming the class called (``aio.Semaphore() got an
    unexpected keyword argument 'hots'``). The signature seen by type checkers, ``inspect`` and the docs
    is the function's own (``__wrapped__``); a valid call pays one function call more, nothing else."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        inner = _own_init(cls)
        name = public_name(cls)

        @functools.wraps(inner)
        def __init__(self: Any, *args: Any, **kw: Any) -> None:
            try:
                inner(self, *args, **kw)
            except TypeError:
                try:  # arguments that do not bind never reached the body: the call itself was wrong
                    inspect.signature(inner).bind(self, *args, **kw)
                except TypeError as wrong:
                    raise TypeError(f"{name}() {wrong}") from None
                raise

        __init__._inherited = "__init__" not in cls.__dict__  # type: ignore[attr-defined]
        cls.__init__ = __init__  # type: ignore[method-assign]


def _own_init(cls: type) -> Callable[..., None]:
    """The ``__init__`` the class would run without the wrappers: the first one in its MRO that a class
    defines (a wrapper a class got only for an inherited one does not count, so a mixin that defines
    none does not hide a later base's, as type checkers see it)."""
    for k in cls.__mro__:
        f = k.__dict__.get("__init__")
        if f is not None and not getattr(f, "_inherited", False):
            return getattr(f, "__wrapped__", f)  # type: ignore[no-any-return]
    raise AssertionError("object defines __init__")  # (unreachable)

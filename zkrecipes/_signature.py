"""Recipe constructors: the keywords every recipe takes, written once (:class:`Options`, with their
:data:`DEFAULTS`), and errors that name the public class called, not the internal base whose ``__init__``
it inherits (``FairLock(zk, p, hots="a")`` -> ``FairLock() got an unexpected keyword argument 'hots'``).

A constructor takes them as ``**options: Unpack[Options]``: type checkers check each keyword by name and
type as if it were spelt out, and :class:`NamedInit` spells them out at run time (``inspect``, ``help()``
and the docs show ``host=None, acl=None, ...``, and an unknown keyword is a TypeError, as before)."""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Sequence, TypedDict

import tenacity
from kazoo.security import ACL

from . import formats

if TYPE_CHECKING:
    from typing_extensions import Unpack as Unpack  # (typing's own from Python 3.11 on)


class Options(TypedDict, total=False):
    """The keyword-only arguments of every recipe's constructor (each recipe documents them)."""

    host: Optional[str]
    acl: Optional[Sequence[ACL]]
    retry: Optional[tenacity.Retrying]
    tolerate_suspended: bool
    protocol: str


DEFAULTS: Options = {"host": None, "acl": None, "retry": None, "tolerate_suspended": False,
                     "protocol": formats.ZKRECIPES}
"""The value of each keyword a caller leaves out."""

_OPTIONS = [  # as a signature shows them: keyword-only, in declaration order, with their types and defaults
    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=DEFAULTS[name],  # type: ignore[literal-required]
                      annotation=getattr(hint, "__forward_arg__", hint))
    for name, hint in Options.__annotations__.items()
]


def public_name(cls: type) -> str:
    """``FairLock``, or ``aio.FairLock`` for a class of :mod:`zkrecipes.aio`."""
    return ("aio." if cls.__module__.startswith("zkrecipes.aio") else "") + cls.__qualname__


class NamedInit:
    """Every subclass gets a thin wrapper of its ``__init__`` (its own or the one it inherits): a call
    whose arguments do not fit raises TypeError naming the class called (``aio.Semaphore() got an
    unexpected keyword argument 'hots'``). The signature seen by ``inspect`` and the docs is the
    function's own with ``**options`` spelt out (:func:`spelt_out`); type checkers see the function's own.
    A valid call pays one function call and one set comparison more, nothing else."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        inner = _own_init(cls)
        name = public_name(cls)
        sig = spelt_out(inspect.signature(inner))
        names = None if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()) else frozenset(sig.parameters)

        @functools.wraps(inner)
        def __init__(self: Any, *args: Any, **kw: Any) -> None:
            if names is not None and not names.issuperset(kw):  # (a keyword that **options would take without a word)
                _refuse(name, sig, self, args, kw)
            try:
                inner(self, *args, **kw)
            except TypeError:
                _refuse(name, sig, self, args, kw)  # arguments that do not bind never reached the body
                raise

        __init__._inherited = "__init__" not in cls.__dict__  # type: ignore[attr-defined]
        __init__.__signature__ = sig  # type: ignore[attr-defined]
        __init__.__annotations__ = {p.name: p.annotation for p in sig.parameters.values()
                                    if p.annotation is not p.empty} | {"return": sig.return_annotation}
        cls.__init__ = __init__  # type: ignore[method-assign]


def spelt_out(sig: inspect.Signature) -> inspect.Signature:
    """``sig`` with a ``**options`` parameter replaced by the :class:`Options` keywords, placed before the
    function's own keyword-only parameters (``..., protocol="zkrecipes", owner=None``)."""
    params = list(sig.parameters.values())
    if not params or params[-1].kind is not inspect.Parameter.VAR_KEYWORD or params[-1].name != "options":
        return sig
    params.pop()
    at = next((i for i, p in enumerate(params) if p.kind is inspect.Parameter.KEYWORD_ONLY), len(params))
    return sig.replace(parameters=params[:at] + _OPTIONS + params[at:])


def _refuse(name: str, sig: inspect.Signature, self: Any, args: Any, kw: Dict[str, Any]) -> None:
    """Raise the TypeError of a call that does not bind, naming the class called; return if it binds."""
    try:
        sig.bind(self, *args, **kw)
    except TypeError as wrong:
        raise TypeError(f"{name}() {wrong}") from None


def _own_init(cls: type) -> Callable[..., None]:
    """The ``__init__`` the class would run without the wrappers: the first one in its MRO that a class
    defines (a wrapper a class got only for an inherited one does not count, so a mixin that defines
    none does not hide a later base's, as type checkers see it)."""
    for k in cls.__mro__:
        f = k.__dict__.get("__init__")
        if f is not None and not getattr(f, "_inherited", False):
            return getattr(f, "__wrapped__", f)  # type: ignore[no-any-return]
    raise AssertionError("object defines __init__")  # (unreachable)

"""The docs name only what exists: every keyword in a documented constructor call (``Name(a, *, kw=...)``
in docs/*.rst) is a parameter of that class, and every exception the docs reference is one zkrecipes has."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import zkrecipes
import zkrecipes.aio as aio
from zkrecipes._lock import Participant

DOCS = Path(__file__).resolve().parents[2] / "docs"
CALL = re.compile(r"``(?:aio\.)?([A-Z]\w+)\(([^`]*)\)``")
EXC = re.compile(r":(?:class|exc):`~?(?:zkrecipes\.)?(\w+(?:Error|Lost|Timeout|Failed))`")


def _keywords(cls: type) -> set:
    params = inspect.signature(cls).parameters
    names = {p for p in params if params[p].kind is not inspect.Parameter.VAR_KEYWORD}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        names |= set(inspect.signature(Participant).parameters)  # the recipes pass **kwargs on to it
    return names


def _pages() -> list:
    pages = sorted(DOCS.glob("*.rst"))
    assert pages, DOCS
    return pages


def test_documented_constructor_keywords_exist():
    wrong = []
    for page in _pages():
        for name, args in CALL.findall(page.read_text()):
            cls = getattr(zkrecipes, name, None) or getattr(aio, name, None)
            if not isinstance(cls, type):
                continue
            for kw in re.findall(r"(\w+)\s*=", args):
                if kw not in _keywords(cls):
                    wrong.append(f"{page.name}: {name}(... {kw}=...)")
    assert not wrong, wrong


def test_documented_exceptions_exist():
    import builtins

    import kazoo.exceptions

    wrong = [f"{page.name}: {exc}" for page in _pages() for exc in EXC.findall(page.read_text())
             if not any(hasattr(m, exc) for m in (zkrecipes, aio, builtins, kazoo.exceptions))]
    assert not wrong, wrong

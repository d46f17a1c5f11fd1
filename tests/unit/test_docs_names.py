"""The docs name only what exists: every keyword in a documented constructor call (``Name(a, *, kw=...)``
in docs/*.rst) is a parameter of that class, every exception the docs reference is one zkrecipes has,
every role naming ``zkrecipes.X.y`` resolves, and every zkrecipes name in docs/migrating-kazoo.rst's
kazoo -> zkrecipes table (classes, methods, attributes, keywords) exists."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import re
import types
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


# -- docs/migrating-kazoo.rst: the kazoo -> zkrecipes table names only what zkrecipes has ------------------

LITERAL = re.compile(r"``([^`]+)``")
ROLE = re.compile(r":(?:class|meth|attr|exc):`~?zkrecipes\.([\w.]+)`")
TABLE_ROLE = re.compile(r":(?:class|meth|attr|exc):`~?(?!zkrecipes\.)([\w.]+)`")  # under currentmodule zkrecipes
CAPITAL = re.compile(r"(?<![\w.])([A-Z]\w*)")  # a class or exception named on its own
MEMBER = re.compile(r"\.(\w+)")  # a method or attribute: ``lock.is_held``, ``.read()``
CALL_KWS = re.compile(r"\.(\w+)\(([^()]*)\)")  # ``lock.hold(timeout=5)``


def _classes() -> list:
    return [c for m in (zkrecipes, aio) for c in (getattr(m, n) for n in m.__all__) if isinstance(c, type)]


@functools.lru_cache(maxsize=None)
def _class_members(cls: type) -> frozenset:
    """Public methods, properties and instance attributes of ``cls`` (instance attributes from a recipe
    built on a client that is never started: construction sends nothing)."""
    from kazoo.client import KazooClient

    names = {n for n in dir(cls) if not n.startswith("_")}
    params = set(inspect.signature(cls).parameters) if not issubclass(cls, BaseException) else set()
    if {"client", "path", "identifier"} <= params:  # a recipe
        client = KazooClient(hosts="127.0.0.1:1")
        recipe = cls(client, "/p", 2) if "max_leases" in params else cls(client, "/p")
        names |= {n for n in vars(recipe) if not n.startswith("_")}
    return frozenset(names)


def _method_keywords(name: str) -> set:
    return {p for cls in _classes() if inspect.isfunction(getattr(cls, name, None))
            for p in inspect.signature(getattr(cls, name)).parameters}


def _table_cells(text: str, column: int) -> list:
    """The ``column``-th cell (0-based) of every row of every list-table in ``text``, header included."""
    cells = []
    for table in re.split(r"^\.\. list-table::", text, flags=re.M)[1:]:
        body = re.split(r"\n(?=\S)", table, maxsplit=1)[0]  # up to the first unindented line
        for row in re.split(r"^\s*\* - ", body, flags=re.M)[1:]:
            row_cells = re.split(r"^\s+- ", row, flags=re.M)
            if len(row_cells) > column:
                cells.append(" ".join(row_cells[column].split()))
    return cells


def _unknown_names(cells: list) -> list:
    """What the cells name that zkrecipes does not have: classes, members, keywords of calls."""
    public = set(zkrecipes.__all__) | set(aio.__all__) | {"True", "False", "None"}
    members = set().union(*map(_class_members, _classes()))
    wrong = []
    for cell in cells:
        for lit in LITERAL.findall(cell):
            wrong += [f"{lit}: {n}" for n in CAPITAL.findall(lit) if n not in public]
            wrong += [f"{lit}: .{n}" for n in MEMBER.findall(lit) if n not in members]
            for meth, args in CALL_KWS.findall(lit):
                wrong += [f"{lit}: {meth}({kw}=)" for kw in re.findall(r"(\w+)\s*=", args)
                          if kw not in _method_keywords(meth)]
        wrong += _unknown_roles(cell)
        wrong += [f"zkrecipes.{n} (a role)" for n in TABLE_ROLE.findall(cell) if not _resolves(n)]
    return wrong


def _unknown_roles(text: str) -> list:
    return [f"zkrecipes.{n} (a role)" for n in ROLE.findall(text) if not _resolves(n)]


def _resolves(dotted: str) -> bool:
    """``FairLock.is_held``, ``aio.Semaphore``: each part is a member of the one before (from zkrecipes)."""
    obj: object = zkrecipes
    for part in dotted.split("."):
        if isinstance(obj, types.ModuleType) and not hasattr(obj, part):
            try:
                importlib.import_module(f"{obj.__name__}.{part}")  # a submodule: zkrecipes.testing
            except ImportError:
                return False
        if part not in (_class_members(obj) if isinstance(obj, type) else dir(obj)):
            return False
        obj = getattr(obj, part, None)
    return True


def test_kazoo_migration_table_names_only_what_zkrecipes_has():
    text = (DOCS / "migrating-kazoo.rst").read_text()
    header, *rows = _table_cells(text[text.index("From kazoo's API to zkrecipes'"):], 1)
    assert header == "zkrecipes" and len(rows) >= 20, (header, len(rows))
    for recipe in ("FairLock(", "ReadWriteLock(", "Semaphore(", "LeaderElection(", "LockTimeout", "LockCancelled"):
        assert any(recipe in row for row in rows), f"the table maps nothing to {recipe}"
    assert not _unknown_names(rows), _unknown_names(rows)


def test_documented_roles_name_what_exists():
    """``:class:`~zkrecipes.X```, ``:meth:`zkrecipes.X.y```, ... on every page resolve to a zkrecipes name."""
    wrong = [f"{page.name}: {w}" for page in _pages() for w in _unknown_roles(page.read_text())]
    if importlib.util.find_spec("tooz") is None:  # the tooz extra needs Python 3.11+: its module cannot import
        wrong = [w for w in wrong if "zkrecipes.tooz." not in w]
    assert not wrong, wrong


def test_the_table_check_catches_a_name_zkrecipes_does_not_have():
    cells = ["``lock.is_acquired``", "``Lessee(zk, path)``", "``lock.hold(deadline=5)``",
             ":meth:`~zkrecipes.FairLock.lease_holders`", ":attr:`zkrecipes.FairLock.max_leases`", ":exc:`Cancelled`"]
    assert _unknown_names(cells) == ["lock.is_acquired: .is_acquired", "Lessee(zk, path): Lessee",
                                     "lock.hold(deadline=5): hold(deadline=)",
                                     "zkrecipes.FairLock.lease_holders (a role)",
                                     "zkrecipes.FairLock.max_leases (a role)",  # a Semaphore's only
                                     "zkrecipes.Cancelled (a role)"]
    assert _unknown_names(["``lock.is_held``", "``Semaphore(zk, path, 5)``", "``lock.hold(timeout=5)``",
                           ":attr:`~zkrecipes.Semaphore.max_leases`", ":class:`zkrecipes.testing.Ensemble`"]) == []


# -- docs/design.rst: the module map names every module of the package -----------------------------------

PACKAGE = Path(zkrecipes.__file__).resolve().parent


def _modules() -> list:
    """Every module of the package as the map names it: ``_lock``, ``aio/_lock``, ``aio`` (its
    ``__init__``), ``zkrecipes`` (the package's own)."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("").as_posix()
        rel = rel[: -len("/__init__")] if rel.endswith("/__init__") else rel
        names.append("zkrecipes" if rel == "__init__" else rel)
    return names


def _module_map(text: str) -> set:
    section = text.split("Module map\n----------\n", 1)[1]
    section = re.split(r"\n[^\n]+\n-{3,}\n", section, maxsplit=1)[0]  # up to the next section
    return set(re.findall(r"``([\w/]+)``", section))


def test_design_module_map_names_every_module():
    modules = _modules()
    assert len(modules) > 40 and "_engine" in modules and "aio/_driver" in modules, modules
    named = _module_map((DOCS / "design.rst").read_text())
    assert not [m for m in modules if m not in named], [m for m in modules if m not in named]


def test_the_module_map_check_catches_a_missing_module():
    text = "Module map\n----------\n\n- ``_engine``: steps.\n- ``aio/_lock``: the front.\n\nNext\n----\n\n``_lock``\n"
    assert _module_map(text) == {"_engine", "aio/_lock"}

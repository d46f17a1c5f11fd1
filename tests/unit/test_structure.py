"""The package's structure rules (issue 31, item 5), read from the source with ``ast``:

* no import cycle among zkrecipes modules (imports inside functions and under ``TYPE_CHECKING`` count);
* no module touches another module's private names: ``obj._x`` / ``getattr(obj, "_x")`` only for a name
  that module defines itself (``self._x`` / ``cls._x`` may also use what a zkrecipes base class defines);
* kazoo's internals (its private attributes and modules) only in the seam, ``zkrecipes/_kazoo.py`` and
  ``zkrecipes/_kazoo_ops.py``.

Private *modules* of the package (``from . import _kazoo``) are fine: the rule is about names inside them.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

PKG = Path(__file__).resolve().parents[2] / "zkrecipes"
SEAM = ("zkrecipes._kazoo", "zkrecipes._kazoo_ops")  # the seam: the hot path's half and the rest
NAMEDTUPLE_API = {"_fields", "_replace", "_asdict", "_make", "_field_defaults"}  # public despite the underscore
# the tooz backend subclasses tooz's ZooKeeper driver (its group membership): that driver's own attributes
TOOZ_DRIVER = {"_coord", "_member_id", "_namespace", "_paths_join", "_path_group", "_hooks_elected_leader"}
KAZOO_PUBLIC = {"kazoo.client", "kazoo.exceptions", "kazoo.security", "kazoo.protocol.states",
                "kazoo.handlers.threading", "kazoo.retry", "kazoo.interfaces"}


def _modules() -> Dict[str, Tuple[Path, ast.Module]]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = ["zkrecipes"] + list(path.relative_to(PKG).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = (path, ast.parse(path.read_text(), str(path)))
    return out


MODULES = _modules()


def _imported(name: str, path: Path, node: ast.AST) -> Iterator[str]:
    """The zkrecipes modules an import statement of module ``name`` (at ``path``) names."""
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)] + ([node.module] if node.module else [])
            module = ".".join(base)
        else:
            module = node.module or ""
        targets = [f"{module}.{a.name}" for a in node.names]
    else:
        return
    for target in targets:
        while target not in MODULES and "." in target:  # ``from .x import y``: y is a name in module x
            target = target.rsplit(".", 1)[0]
        if target in MODULES and target != name:
            yield target


def _graph() -> Dict[str, Set[str]]:
    return {name: {t for node in ast.walk(tree) for t in _imported(name, path, node)}
            for name, (path, tree) in MODULES.items()}


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    graph = _graph()
    cycles = _cycles(graph)
    described = [" / ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in cycles]
    assert not cycles, "import cycles among zkrecipes modules:\n" + "\n".join(described)


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _defined(tree: ast.AST) -> Set[str]:
    """Every name a module defines: functions, classes, assigned names and attributes, parameters."""
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            names.add(n.attr)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, ast.arg):
            names.add(n.arg)
    return names


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_uses(tree: ast.AST) -> Iterator[Tuple[int, str, bool, str]]:
    """``(line, name, on_self, code)`` for every ``x._name`` and ``getattr/setattr/hasattr(x, "_name")``."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and _private(n.attr):
            on_self = isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")
            on_self = on_self or (isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
                                  and n.value.func.id == "super")
            yield n.lineno, n.attr, on_self, ast.unparse(n)
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
              and n.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(n.args) >= 2
              and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str)
              and _private(n.args[1].value)):
            yield n.lineno, n.args[1].value, False, ast.unparse(n)


def test_no_module_reaches_into_another_modules_private_names():
    everywhere = set().union(*(_defined(tree) for _, tree in MODULES.values()))
    wrong = []
    for name, (path, tree) in MODULES.items():
        if name in SEAM:
            continue
        mine = _defined(tree) | NAMEDTUPLE_API | (TOOZ_DRIVER if name == "zkrecipes.tooz" else set())
        for line, attr, on_self, code in _private_uses(tree):
            # self._x may be a zkrecipes base class's (inheritance); anything else must be this module's own
            if attr not in (everywhere | mine if on_self else mine):
                wrong.append(f"{path.relative_to(PKG.parent)}:{line}: {code}")
    assert not wrong, "private names of another module (or of kazoo) used:\n" + "\n".join(wrong)


def test_the_reach_in_check_sees_attributes_and_getattr():
    tree = ast.parse("def f(o):\n    o._kind\n    getattr(o, '_x', None)\n    self._y\n    o.__class__\n")
    assert [(name, on_self) for _, name, on_self, _ in _private_uses(tree)] == [
        ("_kind", False), ("_x", False), ("_y", True)]


def test_kazoo_internals_only_in_the_seam():
    wrong = []
    for name, (path, tree) in MODULES.items():
        if name in SEAM:
            continue
        for n in ast.walk(tree):
            modules: List[Tuple[str, List[str]]] = []
            if isinstance(n, ast.Import):
                modules = [(a.name, []) for a in n.names]
            elif isinstance(n, ast.ImportFrom) and not n.level and n.module:
                modules = [(n.module, [a.name for a in n.names])]
            for module, names in modules:
                if module.split(".")[0] != "kazoo" or module == "kazoo":
                    continue
                if module not in KAZOO_PUBLIC or any(_private(x) for x in names):
                    wrong.append(f"{path.relative_to(PKG.parent)}:{n.lineno}: {ast.unparse(n)}")
    assert not wrong, "kazoo internals outside zkrecipes/_kazoo.py:\n" + "\n".join(wrong)


# -- what lab/ and bench/ may take from the package ---------------------------------------------------------------
# lab/ and bench/ live outside the package and use its public API; these private modules are the named
# exceptions, each for a reason (a new reach into a private module or name fails the test below, and so does
# an exception no longer used)
OUTSIDE_ALLOWED = {
    "lab": {
        "zkrecipes.testing._proc": "die_with_parent: workers, JVMs and redis-server die with the nemesis",
        "zkrecipes.testing._java": "the Curator worker's compile-and-cache helper (mixed-curator trial)",
    },
    "bench": {
        "zkrecipes._kazoo": "the seam's request counting and raw requests: requests per operation, the floor",
        "zkrecipes._drive": "the blocking driver, timed alone (hot-path CPU and driver overhead)",
        "zkrecipes.aio._driver": "the asyncio driver and its bridge, timed alone",
        "zkrecipes.testing._java": "the Curator baseline's compile-and-cache helper",
    },
}
OUTSIDE = Path(__file__).resolve().parents[2]


def _reach(target: str) -> str:
    """The private part of zkrecipes an import of ``target`` (``a.b`` or ``a.b.name``) reaches, or ''."""
    parts = target.split(".")
    k = max(i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in MODULES)
    module, rest = ".".join(parts[:k]), parts[k:]
    if any(_private(p) for p in parts[:k]):
        return module
    return f"{module}.{rest[0]}" if rest and _private(rest[0]) else ""


def _outside_reaches(root: Path) -> Dict[str, List[str]]:
    """Private zkrecipes modules (or private names) imported by the ``.py`` files under ``root``:
    ``{module: ["file:line", ...]}`` (a private name ``_x`` of a public module ``m`` counts as ``m._x``)."""
    found: Dict[str, List[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: List[str] = []
            if isinstance(n, ast.Import):
                targets = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom) and not n.level and n.module:
                targets = [f"{n.module}.{a.name}" for a in n.names]
            for target in targets:
                reach = _reach(target) if target.split(".")[0] == "zkrecipes" else ""
                if reach:
                    found.setdefault(reach, []).append(f"{path.relative_to(root.parent)}:{n.lineno}")
    return found


def test_lab_and_bench_reach_only_the_named_private_modules():
    for tree_dir, allowed in OUTSIDE_ALLOWED.items():
        found = _outside_reaches(OUTSIDE / tree_dir)
        new = {m: where for m, where in found.items() if m not in allowed}
        assert not new, f"{tree_dir}/ reaches into private parts of zkrecipes (use the public API, or name the " \
                        f"module in OUTSIDE_ALLOWED with a reason): {new}"
        unused = sorted(set(allowed) - set(found))
        assert not unused, f"OUTSIDE_ALLOWED[{tree_dir!r}] names modules {tree_dir}/ no longer imports: {unused}"
        assert all(allowed.values()), "every allowed private module says why"


def test_the_outside_guard_sees_private_modules_and_names(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.py").write_text("from zkrecipes import _kazoo, FairLock\nimport zkrecipes._drive\n"
                                         "from zkrecipes.testing._proc import die_with_parent\n"
                                         "from zkrecipes.testing import Ensemble, four_letter\n"
                                         "from zkrecipes.retry import _x\nimport zkrecipes.aio\n")
    assert sorted(_outside_reaches(tmp_path / "t")) == ["zkrecipes._drive", "zkrecipes._kazoo",
                                                        "zkrecipes.retry._x", "zkrecipes.testing._proc"]


def test_no_import_cycle_in_the_lab():
    """lab/'s modules import each other one way (imports inside functions count, as for the package)."""
    names = {p.stem for p in (OUTSIDE / "lab").glob("*.py") if p.stem != "__init__"}
    graph: Dict[str, Set[str]] = {name: set() for name in names}
    for name in names:
        tree = ast.parse((OUTSIDE / "lab" / f"{name}.py").read_text())
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and (n.level == 1 or (n.module or "").startswith("lab")):
                base = (n.module or "").removeprefix("lab").lstrip(".")
                targets = [base.split(".")[0]] if base else [a.name for a in n.names]
                graph[name] |= {t for t in targets if t in names and t != name}
            elif isinstance(n, ast.Import):
                graph[name] |= {a.name.split(".")[1] for a in n.names
                                if a.name.startswith("lab.") and a.name.split(".")[1] in names}
    assert not _cycles(graph), f"import cycles among lab/ modules: {_cycles(graph)}"

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

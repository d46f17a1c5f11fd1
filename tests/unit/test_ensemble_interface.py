"""Every ensemble class has the one interface of zkrecipes.testing.interface, and the tests use no other
member of the ensembles the fixtures hand them (no ZooKeeper, no Docker: classes and source only).

A member that one ensemble class lacks broke ``make test-docker`` unseen once (``client_ports``, local
only, read by a CLI test through ``zk_ensemble``): the suite passed locally and failed only in Docker.
Here it fails the unit tier: either the class lacks an interface member, or a test reads a member that is
not in the interface.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Dict, Iterator, List, Protocol, Tuple

import pytest

import zkrecipes.testing as kit
from zkrecipes.testing import ControllableEnsemble, DockerEnsemble, Ensemble, EnsembleView, ExternalEnsemble

TESTS = Path(__file__).resolve().parents[1]

# every ensemble class of the kit and the interface it has
ENSEMBLES: Dict[type, type] = {
    Ensemble: ControllableEnsemble,
    DockerEnsemble: ControllableEnsemble,
    ExternalEnsemble: EnsembleView,
}
INTERFACES = (EnsembleView, ControllableEnsemble)

# the names a test or helper gives an ensemble from the fixtures, and the interface it may rely on
FIXTURE_NAMES: Dict[str, type] = {
    "zk_ensemble": EnsembleView,            # local, external or Docker
    "zk_local_ensemble": ControllableEnsemble,  # local or Docker
}
HELPER_PARAMETER = "ensemble"  # a helper's parameter for what a test passes on from zk_ensemble


def members(interface: type) -> Dict[str, object]:
    """The public members an interface declares, its bases' included."""
    out: Dict[str, object] = {}
    for base in reversed(interface.__mro__):
        if base in (object, Protocol) or not getattr(base, "_is_protocol", False):
            continue
        out.update({name: value for name, value in vars(base).items() if not name.startswith("_")})
    return out


def annotated(cls: type) -> set:
    """Names a class (or a base) declares with an annotation: instance attributes set in ``__init__``."""
    return {name for base in cls.__mro__ for name in vars(base).get("__annotations__", {})}


def signature_gaps(want: inspect.Signature, have: inspect.Signature) -> List[str]:
    """Why a method with signature ``have`` cannot be called as ``want`` allows (empty: it can)."""
    gaps = []
    wanted = list(want.parameters.values())
    offered = list(have.parameters.values())
    for k, p in enumerate(wanted):
        q = have.parameters.get(p.name)
        if q is None:
            gaps.append(f"no parameter {p.name!r}")
            continue
        if q.kind != p.kind:
            gaps.append(f"{p.name!r} is {q.kind.description}, not {p.kind.description}")
        elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and offered[k].name != p.name:
            gaps.append(f"{p.name!r} is not parameter {k}")
        if p.default is not p.empty and q.default != p.default:
            gaps.append(f"{p.name!r} defaults to {q.default!r}, not {p.default!r}")
    for q in offered:
        if q.name not in want.parameters and q.default is q.empty and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD):
            gaps.append(f"extra required parameter {q.name!r}")
    return gaps


def interface_gaps(cls: type, interface: type) -> List[str]:
    gaps = []
    for name, declared in members(interface).items():
        if isinstance(declared, property):  # a property or a plain attribute will do
            if not (isinstance(getattr(cls, name, None), property) or name in annotated(cls)):
                gaps.append(f"{cls.__name__}.{name}: missing (neither a property nor an annotated attribute)")
            continue
        have = getattr(cls, name, None)
        if not inspect.isfunction(have):
            gaps.append(f"{cls.__name__}.{name}: missing method")
            continue
        gaps += [f"{cls.__name__}.{name}: {gap}"
                 for gap in signature_gaps(inspect.signature(declared), inspect.signature(have))]
    return gaps


@pytest.mark.parametrize("cls", list(ENSEMBLES), ids=lambda c: c.__name__)
def test_each_ensemble_class_has_its_interface(cls):
    assert interface_gaps(cls, ENSEMBLES[cls]) == []


def test_every_ensemble_class_of_the_kit_is_held_to_an_interface():
    classes = {obj for name in kit.__all__ for obj in [getattr(kit, name)]
               if isinstance(obj, type) and name.endswith("Ensemble") and obj not in INTERFACES}
    assert classes == set(ENSEMBLES)


def test_the_controllable_interface_extends_the_view():
    assert set(members(EnsembleView)) < set(members(ControllableEnsemble))
    assert {"start", "stop", "kill", "pause", "resume"} <= set(members(ControllableEnsemble))


def test_the_check_finds_what_a_class_lacks():
    class Partial:  # a view that lost a member and changed a default: both are named
        size = 1
        hosts = property(lambda self: "127.0.0.1:2181")

        def host(self, i): ...
        def four_letter(self, i, word, timeout=5.0): ...

    gaps = "\n".join(interface_gaps(Partial, EnsembleView))
    assert "Partial.conf: missing method" in gaps
    assert "Partial.four_letter: 'timeout' defaults to 5.0, not 2.0" in gaps
    assert "Partial.size: missing" in gaps  # a class attribute that is neither property nor annotation
    assert "Partial.hosts" not in gaps and "Partial.host:" not in gaps


# -- what the tests use -------------------------------------------------------------------------------------

def ensemble_uses(tree: ast.AST) -> Iterator[Tuple[int, str, str, type]]:
    """``(line, name, attribute, interface)`` for each attribute read on a fixture's ensemble."""
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        args = func.args.posonlyargs + func.args.args + func.args.kwonlyargs
        bound = {a.arg: FIXTURE_NAMES[a.arg] for a in args if a.arg in FIXTURE_NAMES}
        if not func.name.startswith("test_"):
            bound.update({a.arg: EnsembleView for a in args if a.arg == HELPER_PARAMETER})
        for node in ast.walk(func):  # ens = zk_local_ensemble
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in bound
                    and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                bound[node.targets[0].id] = bound[node.value.id]
        for node in ast.walk(func):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
                yield node.lineno, node.value.id, node.attr, bound[node.value.id]


def test_tests_use_only_the_interface_of_the_fixture_ensembles():
    wrong, seen = [], 0
    for path in sorted(TESTS.rglob("*.py")):
        for line, name, attr, interface in ensemble_uses(ast.parse(path.read_text(), str(path))):
            seen += 1
            if attr not in members(interface):
                wrong.append(f"{path.relative_to(TESTS)}:{line}: {name}.{attr} is not in {interface.__name__}")
    assert not wrong, "\n".join(wrong)
    assert seen > 50  # the scan does see the suite's uses


def test_the_scan_sees_a_local_only_member():
    source = '''
def _received(ensemble):
    return ensemble.client_ports
def test_x(zk_local_ensemble, zk_ensemble):
    ens = zk_local_ensemble
    ens.kill(0)
    ens.workdir
    zk_ensemble.stop(1)
'''
    uses = {(name, attr, interface) for _, name, attr, interface in ensemble_uses(ast.parse(source))}
    assert uses == {("ensemble", "client_ports", EnsembleView), ("ens", "kill", ControllableEnsemble),
                    ("ens", "workdir", ControllableEnsemble), ("zk_ensemble", "stop", EnsembleView)}

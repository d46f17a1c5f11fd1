"""What both adapters share: which hook moves which instrument, and the label policy."""

from __future__ import annotations

from typing import Callable, Dict, Optional

from . import HOLDING_STATES, WAITING_STATES, Hooks

PathLabel = Callable[[str], str]
Labels = Dict[str, str]
HOLD_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0)


def validate_path_label(path_label: object) -> Optional[PathLabel]:
    """``path_label`` checked (None: no path label, the default): a function that maps a path to a
    label value from a bounded set."""
    if path_label is not None and not callable(path_label):
        raise TypeError(f"path_label must be a function of a path or None, got {path_label!r}")
    return path_label


class Exporter(Hooks):
    """The hooks as instrument updates: an adapter supplies :meth:`_wait`, :meth:`_hold` (histograms, in
    seconds) and :meth:`_add` (counters and gauges by name: ``holding``, ``waiting``, ``lost``,
    ``suspended``, ``retries``, ``nudges``)."""

    def __init__(self, path_label: Optional[PathLabel] = None) -> None:
        self.path_label = validate_path_label(path_label)

    def _labels(self, recipe: str, path: str) -> Labels:
        if self.path_label is None:
            return {"recipe": recipe}
        return {"recipe": recipe, "path": str(self.path_label(path))}

    def _wait(self, labels: Labels, seconds: float) -> None:
        raise NotImplementedError

    def _hold(self, labels: Labels, seconds: float) -> None:
        raise NotImplementedError

    def _add(self, name: str, labels: Labels, n: int) -> None:
        raise NotImplementedError

    def acquired(self, recipe: str, path: str, waited_s: float, outcome: str) -> None:
        self._wait({**self._labels(recipe, path), "outcome": outcome}, waited_s)

    def released(self, recipe: str, path: str, held_s: float, outcome: str) -> None:
        self._hold({**self._labels(recipe, path), "outcome": outcome}, held_s)

    def state(self, recipe: str, path: str, old: str, new: str) -> None:
        labels = self._labels(recipe, path)
        for states, name in ((WAITING_STATES, "waiting"), (HOLDING_STATES, "holding")):
            if old in states and new not in states:
                self._add(name, labels, -1)
            elif new in states and old not in states:
                self._add(name, labels, 1)
        if new in ("lost", "suspended"):
            self._add(new, labels, 1)

    def retry(self, error: str) -> None:
        self._add("retries", {"error": error}, 1)

    def nudge(self) -> None:
        self._add("nudges", {}, 1)

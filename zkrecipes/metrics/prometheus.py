"""Prometheus metrics for zkrecipes (``pip install 'zkrecipes[prometheus]'``): ``install()`` and scrape.

==================================  =========  ============================================================
``zkrecipes_acquire_wait_seconds``  histogram  time an acquire / campaign took; labels ``recipe``, ``outcome``
``zkrecipes_hold_seconds``          histogram  time a hold lasted; ``recipe``, ``outcome`` (released / lost)
``zkrecipes_holding``               gauge      lock / election objects holding (held, leader, suspended)
``zkrecipes_waiting``               gauge      lock / election objects waiting (waiting, candidate)
``zkrecipes_lost_total``            counter    holds reported lost; ``recipe``
``zkrecipes_suspended_total``       counter    holds that fell in doubt; ``recipe``
``zkrecipes_retries_total``         counter    requests retried; ``error`` (the transient error)
``zkrecipes_nudges_total``          counter    servers nudged for a reply they sat on
==================================  =========  ============================================================

Gauges and counters carry ``recipe``; all of ``recipe``'s metrics carry ``path`` too when ``install`` is
given ``path_label``, a function that maps a lock's path to a label value from a *bounded* set (Prometheus
keeps one series per value: never pass the path itself when paths are made per request or per key).

``install`` is idempotent per registry: called again for the same registry and ``path_label`` it
installs and returns the same hooks (the metrics are registered once); another ``path_label`` for that
registry, or a registry that holds other metrics of these names, is a ValueError naming the registry.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Dict, List, Optional

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from . import install as _install
from ._exporter import HOLD_BUCKETS, Exporter, Labels, PathLabel, validate_path_label


class PrometheusHooks(Exporter):
    """:class:`~zkrecipes.metrics.Hooks` that update Prometheus metrics registered in ``registry`` (all of
    them or, on a ValueError naming the registry and the clash, none)."""

    def __init__(self, registry: Optional[CollectorRegistry] = None, path_label: Optional[PathLabel] = None) -> None:
        super().__init__(path_label)
        if registry is not None and not isinstance(registry, CollectorRegistry):
            raise TypeError(f"registry must be a prometheus_client CollectorRegistry or None, got {registry!r}")
        reg = self.registry = REGISTRY if registry is None else registry
        keys = ["recipe"] + (["path"] if self.path_label is not None else [])
        made: List[Any] = []

        def make(kind: Callable[..., Any], name: str, doc: str, labels: List[str], **kw: Any) -> Any:
            metric = kind(name, doc, labels, registry=None, **kw)
            try:
                reg.register(metric)
            except ValueError as exc:  # prometheus_client's "Duplicated timeseries": say where, leave nothing
                for m in made:
                    reg.unregister(m)
                raise ValueError(f"{_name(reg)} already has a metric named like zkrecipes' {name} ({exc}); "
                                 "zkrecipes' metrics need a registry where they are the only ones of "
                                 "these names") from None
            made.append(metric)
            return metric

        self.wait = make(Histogram, "zkrecipes_acquire_wait_seconds", "Time an acquire or campaign took, by outcome",
                         keys + ["outcome"], buckets=HOLD_BUCKETS)
        self.hold = make(Histogram, "zkrecipes_hold_seconds", "Time a hold lasted, from grant to release or loss",
                         keys + ["outcome"], buckets=HOLD_BUCKETS)
        self.metrics: Dict[str, Any] = {
            "holding": make(Gauge, "zkrecipes_holding", "Lock and election objects holding", keys),
            "waiting": make(Gauge, "zkrecipes_waiting", "Lock and election objects waiting", keys),
            "lost": make(Counter, "zkrecipes_lost", "Holds reported lost", keys),
            "suspended": make(Counter, "zkrecipes_suspended", "Holds that fell in doubt", keys),
            "retries": make(Counter, "zkrecipes_retries", "Requests retried after a transient error", ["error"]),
            "nudges": make(Counter, "zkrecipes_nudges", "Servers nudged for a reply they sat on", []),
        }

    def _wait(self, labels: Labels, seconds: float) -> None:
        self.wait.labels(**labels).observe(seconds)

    def _hold(self, labels: Labels, seconds: float) -> None:
        self.hold.labels(**labels).observe(seconds)

    def _add(self, name: str, labels: Labels, n: int) -> None:
        metric = self.metrics[name]
        metric = metric.labels(**labels) if labels else metric
        metric.inc(n)


def _name(registry: CollectorRegistry) -> str:
    return "prometheus_client's default registry" if registry is REGISTRY else f"registry {registry!r}"


# the hooks registered in each registry by install(): a second install() for it returns them
_by_registry: "weakref.WeakKeyDictionary[CollectorRegistry, PrometheusHooks]" = weakref.WeakKeyDictionary()
_by_registry_lock = threading.Lock()


def install(registry: Optional[CollectorRegistry] = None, path_label: Optional[PathLabel] = None) -> PrometheusHooks:
    """Register zkrecipes' metrics in ``registry`` (default: prometheus_client's global one) and install
    hooks that update them (replacing any installed hooks); returns the hooks.

    Idempotent per registry: called again with the same registry and the same ``path_label`` (the same
    function, or None both times) it registers nothing, installs the hooks it returned before and returns
    them. Raises ValueError naming the registry, registering nothing, if that registry got zkrecipes'
    metrics with another ``path_label`` (their label names are fixed once registered: pass the same
    function, or use another registry) or holds metrics of these names registered by someone else."""
    if registry is not None and not isinstance(registry, CollectorRegistry):
        raise TypeError(f"registry must be a prometheus_client CollectorRegistry or None, got {registry!r}")
    reg = REGISTRY if registry is None else registry
    path_label = validate_path_label(path_label)
    with _by_registry_lock:
        hooks = _by_registry.get(reg)
        if hooks is None:
            hooks = _by_registry[reg] = PrometheusHooks(reg, path_label)
        elif hooks.path_label is not path_label:
            raise ValueError(f"{_name(reg)} already has zkrecipes' metrics, installed with path_label="
                             f"{hooks.path_label!r}, not {path_label!r}: install() again with the same path_label "
                             "(the same function), or use another registry")
        _install(hooks)
    return hooks

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
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from . import install as _install
from ._exporter import HOLD_BUCKETS, Exporter, Labels, PathLabel


class PrometheusHooks(Exporter):
    """:class:`~zkrecipes.metrics.Hooks` that update Prometheus metrics registered in ``registry``."""

    def __init__(self, registry: Optional[CollectorRegistry] = None, path_label: Optional[PathLabel] = None) -> None:
        super().__init__(path_label)
        if registry is not None and not isinstance(registry, CollectorRegistry):
            raise TypeError(f"registry must be a prometheus_client CollectorRegistry or None, got {registry!r}")
        reg = REGISTRY if registry is None else registry
        keys = ["recipe"] + (["path"] if self.path_label is not None else [])
        self.wait = Histogram("zkrecipes_acquire_wait_seconds", "Time an acquire or campaign took, by outcome",
                              keys + ["outcome"], buckets=HOLD_BUCKETS, registry=reg)
        self.hold = Histogram("zkrecipes_hold_seconds", "Time a hold lasted, from grant to release or loss",
                              keys + ["outcome"], buckets=HOLD_BUCKETS, registry=reg)
        self.metrics: Dict[str, Any] = {
            "holding": Gauge("zkrecipes_holding", "Lock and election objects holding", keys, registry=reg),
            "waiting": Gauge("zkrecipes_waiting", "Lock and election objects waiting", keys, registry=reg),
            "lost": Counter("zkrecipes_lost", "Holds reported lost", keys, registry=reg),
            "suspended": Counter("zkrecipes_suspended", "Holds that fell in doubt", keys, registry=reg),
            "retries": Counter("zkrecipes_retries", "Requests retried after a transient error", ["error"],
                               registry=reg),
            "nudges": Counter("zkrecipes_nudges", "Servers nudged for a reply they sat on", registry=reg),
        }

    def _wait(self, labels: Labels, seconds: float) -> None:
        self.wait.labels(**labels).observe(seconds)

    def _hold(self, labels: Labels, seconds: float) -> None:
        self.hold.labels(**labels).observe(seconds)

    def _add(self, name: str, labels: Labels, n: int) -> None:
        metric = self.metrics[name]
        metric = metric.labels(**labels) if labels else metric
        metric.inc(n)


def install(registry: Optional[CollectorRegistry] = None, path_label: Optional[PathLabel] = None) -> PrometheusHooks:
    """Register zkrecipes' metrics in ``registry`` (default: prometheus_client's global one) and install
    hooks that update them (replacing any installed hooks); returns the hooks. Once per registry:
    registering the same names twice raises prometheus_client's ValueError."""
    hooks = PrometheusHooks(registry, path_label)
    _install(hooks)
    return hooks

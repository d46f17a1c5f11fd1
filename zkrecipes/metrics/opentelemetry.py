"""OpenTelemetry metrics for zkrecipes (``pip install 'zkrecipes[opentelemetry]'``): the Prometheus
adapter's instruments (:mod:`zkrecipes.metrics.prometheus`) under dotted names, from a meter named
``zkrecipes``:

=============================  ================  ===============================================
``zkrecipes.acquire.wait``     histogram, s      attributes ``recipe``, ``outcome``
``zkrecipes.hold``             histogram, s      ``recipe``, ``outcome`` (released / lost)
``zkrecipes.holding``          up-down counter   ``recipe``
``zkrecipes.waiting``          up-down counter   ``recipe``
``zkrecipes.lost``             counter           ``recipe``
``zkrecipes.suspended``        counter           ``recipe``
``zkrecipes.retries``          counter           ``error``
``zkrecipes.nudges``           counter
=============================  ================  ===============================================

``path`` is added to ``recipe``'s attributes only with ``path_label`` (see the Prometheus adapter).
``install`` is idempotent per meter provider: called again for it with the same ``path_label`` it installs
and returns the same hooks.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Dict, Optional

from opentelemetry import metrics as otel

from . import install as _install
from ._exporter import Exporter, Labels, PathLabel, validate_path_label

_COUNTERS = (
    ("holding", "Lock and election objects holding", True),
    ("waiting", "Lock and election objects waiting", True),
    ("lost", "Holds reported lost", False),
    ("suspended", "Holds that fell in doubt", False),
    ("retries", "Requests retried after a transient error", False),
    ("nudges", "Servers nudged for a reply they sat on", False),
)


class OpenTelemetryHooks(Exporter):
    """:class:`~zkrecipes.metrics.Hooks` that record to instruments of ``meter_provider``'s meter."""

    def __init__(self, meter_provider: Optional[otel.MeterProvider] = None,
                 path_label: Optional[PathLabel] = None) -> None:
        super().__init__(path_label)
        if meter_provider is not None and not isinstance(meter_provider, otel.MeterProvider):
            raise TypeError(f"meter_provider must be an OpenTelemetry MeterProvider or None, got {meter_provider!r}")
        meter = (meter_provider or otel.get_meter_provider()).get_meter("zkrecipes")
        self.wait = meter.create_histogram("zkrecipes.acquire.wait", unit="s",
                                           description="Time an acquire or campaign took, by outcome")
        self.hold = meter.create_histogram("zkrecipes.hold", unit="s",
                                           description="Time a hold lasted, from grant to release or loss")
        self.metrics: Dict[str, Any] = {
            name: (meter.create_up_down_counter if updown else meter.create_counter)(
                f"zkrecipes.{name}", unit="1", description=description)
            for name, description, updown in _COUNTERS
        }

    def _wait(self, labels: Labels, seconds: float) -> None:
        self.wait.record(seconds, labels)

    def _hold(self, labels: Labels, seconds: float) -> None:
        self.hold.record(seconds, labels)

    def _add(self, name: str, labels: Labels, n: int) -> None:
        self.metrics[name].add(n, labels)


# the hooks install() made for each meter provider: a second install() for it returns them
_by_provider: "weakref.WeakKeyDictionary[otel.MeterProvider, OpenTelemetryHooks]" = weakref.WeakKeyDictionary()
_by_provider_lock = threading.Lock()


def install(meter_provider: Optional[otel.MeterProvider] = None,
            path_label: Optional[PathLabel] = None) -> OpenTelemetryHooks:
    """Create zkrecipes' instruments from ``meter_provider`` (default: the global one, as it is now) and
    install hooks that record to them (replacing any installed hooks); returns the hooks.

    Idempotent per provider: called again for the same provider and ``path_label`` (the same function, or
    None both times) it installs the hooks it returned before and returns them. With another
    ``path_label`` it returns new hooks with that label, recording to the same instruments (the meter
    gives an instrument of the same name back), so nothing is counted twice."""
    if meter_provider is not None and not isinstance(meter_provider, otel.MeterProvider):
        raise TypeError(f"meter_provider must be an OpenTelemetry MeterProvider or None, got {meter_provider!r}")
    provider = meter_provider or otel.get_meter_provider()
    path_label = validate_path_label(path_label)
    with _by_provider_lock:
        hooks = _by_provider.get(provider)
        if hooks is None or hooks.path_label is not path_label:
            hooks = _by_provider[provider] = OpenTelemetryHooks(provider, path_label)
        _install(hooks)
    return hooks

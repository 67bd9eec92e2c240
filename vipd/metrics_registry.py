"""vipd's glue to prometheus_client: the registry, a gauge that can be absent, the scrape.

What it is: what ``vipd.metrics`` defines its metrics on, kept apart from the definitions.
``Registry`` is prometheus_client's ``CollectorRegistry`` with functions run before each
collection (what brings lazily updated counters up to date, such as a VRRP Backup's quiet
copies); ``OptionalGauge`` is a gauge with no sample while its value is unknown; `expose`
renders a registry in the text format 0.0.4, 1.0.0 or OpenMetrics 1.0, as an HTTP
``Accept`` header asks. The types, the process metrics and the formats are prometheus_client's
(https://github.com/prometheus/client_python); the formats are its
https://prometheus.io/docs/instrumenting/exposition_formats/ and OpenMetrics 1.0
(https://github.com/prometheus/OpenMetrics/blob/v1.0.0/specification/OpenMetrics.md).

What it must not do: define vipd's metrics (``vipd.metrics`` does), do any I/O, or be
imported by the pure core (prometheus_client takes locks and starts with threading).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, disable_created_metrics
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["OptionalGauge", "Registry", "expose"]

# No *_created series next to every counter and histogram: they double the exposition and
# the text format 0.0.4 does not use them (the process start time is exported anyway). It
# is prometheus_client's global switch: vipd is its only user in the process.
disable_created_metrics()  # type: ignore[no-untyped-call]


class Registry(CollectorRegistry):
    """prometheus_client's registry, with functions run before each collection (a scrape,
    ``get_sample_value``), by name: what brings counters up to date that are updated lazily
    (a VRRP Backup's quiet copies)."""

    def __init__(self) -> None:
        super().__init__(auto_describe=True)
        self._before: dict[str, Callable[[], None]] = {}

    def before_expose(self, name: str, fn: Callable[[], None]) -> None:
        """Run ``fn`` before each collection; one per ``name``."""
        self._before[name] = fn

    def forget_before_expose(self, name: str, fn: Callable[[], None]) -> None:
        """No longer run ``fn`` (if another took its name since, that one stays)."""
        if self._before.get(name) == fn:
            del self._before[name]

    def collect(self) -> Iterator[Metric]:
        for fn in list(self._before.values()):
            fn()
        yield from super().collect()


class OptionalGauge(Collector):
    """A gauge with no sample while its value is unknown: an absent series, which
    ``absent()`` and every comparison treat as "no data", instead of a -1 that a query would
    have to know to leave out."""

    def __init__(
        self,
        name: str,
        documentation: str,
        registry: CollectorRegistry,
        labelnames: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        # label values -> a value or a function read when scraped
        self._values: dict[tuple[str, ...], float | Callable[[], float | None] | None] = {}
        registry.register(self)

    def _key(self, labels: Mapping[str, str]) -> tuple[str, ...]:
        if set(labels) != set(self.labelnames):
            raise ValueError(f"{self.name} takes the labels {self.labelnames}, not {labels}")
        return tuple(str(labels[n]) for n in self.labelnames)

    def set(self, value: float | None, **labels: str) -> None:
        self._values[self._key(labels)] = value

    def set_function(self, fn: Callable[[], float | None], **labels: str) -> None:
        """Read the value when scraped (None: no sample)."""
        self._values[self._key(labels)] = fn

    def get(self, **labels: str) -> float | None:
        v = self._values.get(self._key(labels))
        return v() if callable(v) else v

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
        # dict.copy() is atomic under the GIL: the loop may add a series while we read.
        for key, v in self._values.copy().items():
            value = v() if callable(v) else v
            if value is not None:
                family.add_metric(list(key), value)
        return [family]


def expose(registry: CollectorRegistry, accept: str) -> tuple[bytes, str]:
    """(body, content type) of a scrape of ``registry`` for an HTTP Accept header, as
    prometheus_client's ``choose_encoder`` decides: OpenMetrics 1.0 for the first
    ``application/openmetrics-text`` entry of version 1.0.0 or none (what Prometheus sends
    first), the text format 1.0.0 for a ``text/plain`` entry of version 1.0.0 before it, else
    the text format 0.0.4. Entries are taken in order; quality values are not weighed."""
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type

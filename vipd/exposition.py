"""vipd's own Prometheus metric types and their text exposition.

What it is: counters, gauges, gauges with no sample while unknown, histograms, the standard
``process_*`` metrics, a registry that holds them in definition order, and the two text
formats a Prometheus server scrapes:

- the Prometheus text format 0.0.4 (``text/plain; version=0.0.4``), as specified in the
  Prometheus documentation ("Exposition formats", text-based format) and parsed by
  ``github.com/prometheus/common/expfmt`` (``TextParser``): ``# HELP`` with ``\\`` and
  newline escaped, ``# TYPE``, one ``name{label="value",...} value`` line per sample, label
  values with ``\\``, ``"`` and newline escaped, ``+Inf``/``-Inf``/``NaN``, counters named
  with their ``_total`` suffix in HELP and TYPE as in the samples;
- OpenMetrics 1.0 (``application/openmetrics-text; version=1.0.0``, the OpenMetrics
  specification, "Text format"): the same samples, counter families named without
  ``_total``, ``"`` also escaped in HELP, and the closing ``# EOF``.

Labels are written in name order and series in creation order. No ``_created`` series: the
text format does not carry them, and the process start time is exported anyway.

An update on the advert path is one attribute add on a child object held by the caller (no
lock, no dict lookup); a histogram observation is a bisect and two adds under a lock, so a
scrape never sees a bucket count without its sum. Writers are the event loop (and, for the
few metrics of the worker threads, those threads, one per series); the HTTP thread only
reads, over a copy of each family's series table.

What it must not do: any I/O except reading ``/proc/self`` for the process metrics when a
scrape asks for them; import anything heavy (this module is imported at start-up by every
shell module that counts something).
"""

from __future__ import annotations

import math
import os
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Generic, TypeVar

Sample = tuple[str, tuple[tuple[str, str], ...], float]
C = TypeVar("C")

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# escaping=underscores: the names are all in the legacy character set, so a UTF-8 aware
# scraper must not expect any other escaping scheme (OpenMetrics 1.0 with the Prometheus 3
# content negotiation).
OPENMETRICS_CONTENT_TYPE = (
    "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores"
)


def format_value(value: float) -> str:
    """A sample value as the text formats spell it (Go's ``ParseFloat`` reads all of these)."""
    if value != value:
        return "NaN"
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    return repr(float(value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str, openmetrics: bool) -> str:
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    return text.replace('"', '\\"') if openmetrics else text


def _label_text(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{_escape_label(v)}"' for k, v in pairs)
    return "{" + inner + "}" if inner else ""


class Family:
    """One metric family: a name, a type, help text and label names."""

    kind = "untyped"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        registry: Registry | None = None,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        if registry is not None:
            registry.register(self)

    def samples(self) -> Iterator[Sample]:
        """(sample name, sorted label pairs, value) of every series, read now."""
        return iter(())

    def _key(self, values: Sequence[object], labels: Mapping[str, object]) -> tuple[str, ...]:
        if values and labels:
            raise ValueError(f"{self.name}: label values by position or by name, not both")
        if labels:
            if set(labels) != set(self.labelnames):
                raise ValueError(f"{self.name} takes the labels {self.labelnames}, not {labels}")
            return tuple(str(labels[n]) for n in self.labelnames)
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes the labels {self.labelnames}, not {values}")
        return tuple(str(v) for v in values)

    def _pairs(self, key: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(zip(self.labelnames, key, strict=True)))


class _Value:
    """One series of a counter or a gauge."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0


class CounterChild(_Value):
    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"a counter only goes up, not by {amount}")
        self.value += amount


class GaugeChild(_Value):
    __slots__ = ("_fn",)

    def __init__(self) -> None:
        super().__init__()
        self._fn: Callable[[], float] | None = None

    def set(self, value: float) -> None:
        self._fn = None
        self.value = float(value)

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def set_function(self, fn: Callable[[], float]) -> None:
        """Read the value from ``fn()`` when scraped (until the next `set`)."""
        self._fn = fn

    def get(self) -> float:
        fn = self._fn
        return float(fn()) if fn is not None else self.value


class _Labelled(Family, Generic[C]):
    """A family of series keyed by label values; without labels, one series made now."""

    def _new(self) -> C:
        raise NotImplementedError

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        registry: Registry | None = None,
    ) -> None:
        super().__init__(name, documentation, labelnames, registry)
        self._series: dict[tuple[str, ...], C] = {}
        # An unlabelled family has its one series from the start (its value is 0, not absent).
        self._only: C | None = None if self.labelnames else self.labels()

    def labels(self, *values: object, **labels: object) -> C:
        """The series of these label values, created at 0 the first time."""
        key = self._key(values, labels)
        child = self._series.get(key)
        if child is None:
            child = self._series.setdefault(key, self._new())
        return child

    def remove(self, *values: object) -> None:
        self._series.pop(self._key(values, {}), None)

    def clear(self) -> None:
        self._series = {}

    def _one(self) -> C:
        if self._only is None:
            raise ValueError(f"{self.name} has labels {self.labelnames}: use .labels(...)")
        return self._only

    def _items(self) -> list[tuple[tuple[str, ...], C]]:
        # dict.copy() is atomic under the GIL: the loop may add a series while we read.
        return list(self._series.copy().items())


class Counter(_Labelled[CounterChild]):
    kind = "counter"

    def _new(self) -> CounterChild:
        return CounterChild()

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        registry: Registry | None = None,
    ) -> None:
        if not name.endswith("_total"):
            raise ValueError(f"a counter's name ends in _total: {name}")
        super().__init__(name, documentation, labelnames, registry)

    def inc(self, amount: float = 1.0) -> None:
        self._one().inc(amount)

    def samples(self) -> Iterator[Sample]:
        for key, child in self._items():
            yield self.name, self._pairs(key), child.value


class Gauge(_Labelled[GaugeChild]):
    kind = "gauge"

    def _new(self) -> GaugeChild:
        return GaugeChild()

    def set(self, value: float) -> None:
        self._one().set(value)

    def inc(self, amount: float = 1.0) -> None:
        self._one().inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        self._one().dec(amount)

    def set_function(self, fn: Callable[[], float]) -> None:
        self._one().set_function(fn)

    def samples(self) -> Iterator[Sample]:
        for key, child in self._items():
            yield self.name, self._pairs(key), child.get()


class OptionalGauge(Family):
    """A gauge with no sample while its value is unknown: an absent series, which
    ``absent()`` and every comparison treat as "no data", instead of a -1 that a query would
    have to know to leave out."""

    kind = "gauge"

    def __init__(
        self,
        name: str,
        documentation: str,
        registry: Registry | None = None,
        labelnames: Sequence[str] = (),
    ) -> None:
        super().__init__(name, documentation, labelnames, registry)
        # label values -> a value or a function read when scraped
        self._values: dict[tuple[str, ...], float | Callable[[], float | None] | None] = {}

    def set(self, value: float | None, **labels: str) -> None:
        self._values[self._key((), labels)] = value

    def set_function(self, fn: Callable[[], float | None], **labels: str) -> None:
        """Read the value when scraped (None: no sample)."""
        self._values[self._key((), labels)] = fn

    def get(self, **labels: str) -> float | None:
        v = self._values.get(self._key((), labels))
        return v() if callable(v) else v

    def samples(self) -> Iterator[Sample]:
        for key, v in self._values.copy().items():
            value = v() if callable(v) else v
            if value is not None:
                yield self.name, self._pairs(key), float(value)


class HistogramChild:
    """One series of a histogram: per-bucket counts (the last is +Inf) and the sum."""

    __slots__ = ("_bounds", "_counts", "_lock", "_sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        # bisect_left: the first bound >= value, since a bucket counts value <= le.
        i = bisect_left(self._bounds, value)
        with self._lock:
            self._counts[i] += 1
            self._sum += value

    def snapshot(self) -> tuple[list[int], float]:
        with self._lock:
            return list(self._counts), self._sum


class Histogram(_Labelled[HistogramChild]):
    kind = "histogram"

    def _new(self) -> HistogramChild:
        return HistogramChild(self.buckets)

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] = (),
        registry: Registry | None = None,
    ) -> None:
        bounds = tuple(float(b) for b in buckets if b != math.inf)
        if not bounds or list(bounds) != sorted(set(bounds)):
            raise ValueError(f"{name}: buckets must be increasing and not empty: {buckets}")
        if "le" in labelnames:
            raise ValueError(f"{name}: le is the bucket label")
        self.buckets = bounds
        self._les = [format_value(b) for b in bounds] + ["+Inf"]
        super().__init__(name, documentation, labelnames, registry)

    def observe(self, value: float) -> None:
        self._one().observe(value)

    def samples(self) -> Iterator[Sample]:
        for key, child in self._items():
            pairs = self._pairs(key)
            counts, total = child.snapshot()
            cumulative = 0
            for le, n in zip(self._les, counts, strict=True):
                cumulative += n
                with_le = tuple(sorted((*pairs, ("le", le))))
                yield self.name + "_bucket", with_le, float(cumulative)
            yield self.name + "_count", pairs, float(cumulative)
            yield self.name + "_sum", pairs, total


class ProcessMetrics:
    """The standard process metrics of the Prometheus client libraries ("Writing client
    libraries", Standard and runtime collectors), read from ``/proc/self`` when scraped;
    no sample where there is no ``/proc``. One family each, registered in this order."""

    FAMILIES = (
        ("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes."),
        ("process_resident_memory_bytes", "gauge", "Resident memory size in bytes."),
        (
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
        ),
        (
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
        ),
        ("process_open_fds", "gauge", "Number of open file descriptors."),
        ("process_max_fds", "gauge", "Maximum number of open file descriptors."),
    )

    def __init__(self, registry: Registry, proc: str = "/proc") -> None:
        self._proc = proc
        self._boot_time: float | None = None
        self._ticks = os.sysconf("SC_CLK_TCK")
        self._page = os.sysconf("SC_PAGESIZE")
        for name, kind, documentation in self.FAMILIES:
            _ProcessFamily(self, name, kind, documentation, registry)

    def value(self, name: str) -> float | None:
        """One process value now; None when /proc cannot say."""
        try:
            if name == "process_open_fds":
                return float(len(os.listdir(f"{self._proc}/self/fd")))
            if name == "process_max_fds":
                with open(f"{self._proc}/self/limits") as f:
                    for line in f:
                        if line.startswith("Max open files"):
                            return float(line.split()[3])
                return None
            with open(f"{self._proc}/self/stat", "rb") as fb:
                stat = fb.read().decode()
            # The command name (field 2) may hold spaces and parentheses: split after it,
            # so fields[0] is field 3 of proc(5)'s /proc/pid/stat.
            fields = stat[stat.rindex(")") + 2 :].split()
            if name == "process_virtual_memory_bytes":
                return float(fields[20])
            if name == "process_resident_memory_bytes":
                return float(int(fields[21]) * self._page)
            if name == "process_cpu_seconds_total":
                return (int(fields[11]) + int(fields[12])) / self._ticks
            if name == "process_start_time_seconds":
                return int(fields[19]) / self._ticks + self._boot()
        except (OSError, ValueError, IndexError):
            pass
        return None

    def _boot(self) -> float:
        if self._boot_time is None:
            with open(f"{self._proc}/stat") as f:
                for line in f:
                    if line.startswith("btime "):
                        self._boot_time = float(line.split()[1])
                        break
                else:
                    raise ValueError("no btime in /proc/stat")
        return self._boot_time


class _ProcessFamily(Family):
    def __init__(
        self, source: ProcessMetrics, name: str, kind: str, documentation: str, registry: Registry
    ) -> None:
        self.kind = kind
        self._source = source
        super().__init__(name, documentation, (), registry)

    def samples(self) -> Iterator[Sample]:
        value = self._source.value(self.name)
        if value is not None:
            yield self.name, (), value


class Registry:
    """The families in the order they were defined, and their exposition."""

    def __init__(self) -> None:
        self._families: list[Family] = []
        self._names: set[str] = set()
        # Run before each exposition (the HTTP thread), by name: what brings counters up to
        # date that are updated lazily (a VRRP Backup's quiet copies).
        self._before: dict[str, Callable[[], None]] = {}

    def before_expose(self, name: str, fn: Callable[[], None]) -> None:
        """Run ``fn`` before each ``expose`` and ``get_sample_value``; one per ``name``."""
        self._before[name] = fn

    def forget_before_expose(self, name: str, fn: Callable[[], None]) -> None:
        """No longer run ``fn`` (if another took its name since, that one stays)."""
        if self._before.get(name) == fn:
            del self._before[name]

    def register(self, family: Family) -> None:
        if family.name in self._names:
            raise ValueError(f"{family.name} is already registered")
        self._names.add(family.name)
        self._families.append(family)

    def families(self) -> list[Family]:
        return list(self._families)

    def get_sample_value(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """The value of one sample now (None: no such series); for tests and tools."""
        for fn in list(self._before.values()):
            fn()
        want = tuple(sorted((labels or {}).items()))
        for family in self._families:
            if name.startswith(family.name):
                for sample_name, pairs, value in family.samples():
                    if sample_name == name and pairs == want:
                        return value
        return None

    def expose(self, openmetrics: bool = False) -> bytes:
        for fn in list(self._before.values()):
            fn()
        lines: list[str] = []
        for family in self._families:
            name = family.name
            if openmetrics and family.kind == "counter":
                name = name.removesuffix("_total")
            lines.append(f"# HELP {name} {_escape_help(family.documentation, openmetrics)}")
            lines.append(f"# TYPE {name} {family.kind}")
            for sample_name, pairs, value in family.samples():
                lines.append(f"{sample_name}{_label_text(pairs)} {format_value(value)}")
        if openmetrics:
            lines.append("# EOF")
        return ("\n".join(lines) + "\n").encode()


def negotiate(accept: str) -> tuple[bool, str]:
    """(OpenMetrics?, content type) for an Accept header: OpenMetrics 1.0 when the first
    ``application/openmetrics-text`` entry asks for no version or a version from 1.0.0 on
    (what Prometheus 2.5+ sends first), else the text format 0.0.4 (every Prometheus reads
    it). Quality values are not weighed: the entries' order is the preference, as scrapers
    write them."""
    for entry in accept.split(","):
        media, *params = (p.strip() for p in entry.split(";"))
        if media != "application/openmetrics-text":
            continue
        version = ""
        for param in params:
            key, _, val = param.partition("=")
            if key.strip() == "version":
                version = val.strip()
        if not version or _version(version) >= (1, 0, 0):
            return True, OPENMETRICS_CONTENT_TYPE
    return False, TEXT_CONTENT_TYPE


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in text.split("."))
    except ValueError:
        return (0,)

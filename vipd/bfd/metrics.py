"""BFD's Prometheus families, made on a registry the caller gives, for the agent to register
when it runs BFD (``announce.bgp.bfd.enabled``).

What it is: :class:`BfdMetrics`, built once per registry, with :meth:`BfdMetrics.on_change`
to pass as :class:`vipd.bfd.driver.BfdSessions`' ``on_change`` and
:meth:`BfdMetrics.watch` for the drop counters the driver keeps:

- ``vipd_bfd_session_up{peer}``: 1 while the session with ``peer`` is Up (RFC 5880 §6.2).
- ``vipd_bfd_state_changes_total{peer,state}``: state changes, by the state entered
  (``admin_down``, ``down``, ``init``, ``up``).
- ``vipd_bfd_packets_dropped_total{reason}``: received packets dropped (RFC 5880 §6.8.6,
  RFC 5881 §5), by reason (:data:`vipd.bfd.driver.DROP_REASONS`).
- ``vipd_bfd_send_errors_total``: Control packets the kernel would not send.

They are not on vipd's own registry (``vipd.metrics_agent.REGISTRY``) until the agent runs
BFD: registering them is one call, ``BfdMetrics(REGISTRY)``, at that point, and then a row each
in docs/reference/metrics.md and the golden scrape. ``peer`` takes the configured BGP
peers' addresses only, a bounded set.

What it must not do: run BFD or decide anything; be imported by the pure core.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from vipd.bfd.driver import DROP_REASONS, BfdSessions
from vipd.bfd.packet import State
from vipd.bfd.session import StateChange

__all__ = ["STATE_LABELS", "BfdMetrics"]

STATE_LABELS = {s: s.name.lower() for s in State}


class _Drops(Collector):
    def __init__(self) -> None:
        self.sessions: BfdSessions | None = None

    def collect(self) -> Iterator[Metric]:
        dropped = CounterMetricFamily(
            "vipd_bfd_packets_dropped",
            "BFD packets received and dropped, by reason. ttl: not sent with TTL/hop limit "
            "255, so not from the link (RFC 5881 §5; spoofing or a misrouted multihop "
            "session). unknown_session, wrong_source: a peer vipd has no session with. "
            "auth_unsupported: the peer uses BFD authentication, which vipd does not. The "
            "rest: malformed packets (RFC 5880 §6.8.6). 0 on a healthy link.",
            labels=["reason"],
        )
        errors = CounterMetricFamily(
            "vipd_bfd_send_errors",
            "BFD Control packets the kernel would not send (link down, no route). Any rise "
            "means the peer may time the session out.",
        )
        sessions = self.sessions
        for reason in DROP_REASONS:
            dropped.add_metric([reason], sessions.dropped[reason] if sessions else 0)
        errors.add_metric([], sessions.send_errors if sessions else 0)
        yield dropped
        yield errors

    def describe(self) -> Iterator[Metric]:
        return self.collect()


class BfdMetrics:
    """The BFD families on ``registry`` (one instance per registry)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.up = Gauge(
            "vipd_bfd_session_up",
            "1 while the BFD session with the BGP peer is Up, else 0 (Down, Init or "
            "AdminDown): the path to that router is not proven. "
            "vipd_bfd_state_changes_total says how it got there.",
            ["peer"],
            registry=registry,
        )
        self.changes = Counter(
            "vipd_bfd_state_changes_total",
            "BFD session state changes, by the state entered. A steady rise of down means a "
            "flapping session (a loaded node or a lossy link: see the detection time).",
            ["peer", "state"],
            registry=registry,
        )
        self._drops = _Drops()
        registry.register(self._drops)

    def add_peer(self, peer: str) -> None:
        """Create the peer's series at 0, so a query sees 0 rather than no data."""
        self.up.labels(peer).set(0)
        for label in STATE_LABELS.values():
            self.changes.labels(peer, label)

    def remove_peer(self, peer: str) -> None:
        self.up.remove(peer)
        for label in STATE_LABELS.values():
            self.changes.remove(peer, label)

    def on_change(self, peer: str, change: StateChange) -> None:
        self.changes.labels(peer, STATE_LABELS[change.new]).inc()
        self.up.labels(peer).set(1 if change.new is State.UP else 0)

    def watch(self, sessions: BfdSessions) -> None:
        """Export ``sessions``' drop and send-error counters."""
        self._drops.sessions = sessions

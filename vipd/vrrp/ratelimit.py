"""Per-source rate limits on what a VRRP master sends and logs because of someone else.

What it is: a pure policy of token buckets, one per source (an advert's IP address, a
claimant's MAC) plus one shared by every source, so that forging many source addresses
buys a flood no more than a few sources' worth. ``Limiter.allow(now, key)`` spends a token
or refuses; each verdict carries how many of that key's events were refused since its last
allowed one (what the one log line per window reports as ``suppressed``). The budgets the
VRRP driver uses, in advert intervals (``answers``, ``defences``, ``log_lines``), and why:

- Answers to a lower-priority advert (RFC 9568 §6.4.3: the master "MUST send an
  ADVERTISEMENT immediately"): two at once, then one per advert interval and source. A real
  lower-priority master advertises once per its interval and steps down on the first answer
  that reaches it; the second covers one lost answer or two of its adverts inside one of our
  intervals. Answering more often teaches a real router nothing our periodic advert (an
  interval later at most) would not, while each answer of a flood also restarts the
  machine's advert timer.
- Re-announcements (gratuitous ARP / unsolicited NA) for a claimant: two at once (the
  answer's and the "contest over" one that follows it), then one per three intervals and
  source: clients we moved back stay until the claimant announces again, which a real
  router does only after becoming master again, a Master_Down_Interval (over three
  intervals) after hearing us last.
- Log lines: one per source and kind of line per ``LOG_WINDOW``, the next one saying how
  many were left out.

What it must not do: read a clock, send, log or count metrics: the caller passes ``now``
and carries out the verdict. It never decides the election; it only thins out repeats.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

# Sources remembered per limiter (multicast: anyone can forge any source address). A source
# forgotten comes back with a full bucket: the shared bucket bounds what that buys.
MAX_SOURCES = 64
# The shared bucket holds and earns this many sources' worth.
SHARED_SOURCES = 4
ANSWER_BURST = 2
ANSWER_EVERY = 1  # advert intervals per answer and source, after the burst
DEFENCE_BURST = 2
DEFENCE_EVERY = 3  # advert intervals per re-announcement and source, after the burst
LOG_WINDOW = 10.0  # seconds: one log line per source and kind of line


@dataclass(frozen=True, slots=True)
class Rate:
    """A bucket of ``burst`` tokens that earns one back every ``every`` seconds."""

    burst: float
    every: float

    def __post_init__(self) -> None:
        if not (self.burst >= 1 and self.every > 0):
            raise ValueError(f"a rate needs burst >= 1 and every > 0, not {self!r}")

    def shared(self, sources: int = SHARED_SOURCES) -> Rate:
        return Rate(self.burst * sources, self.every / sources)


def answers(interval: float) -> Rate:
    """Answers to lower-priority adverts, per source (see the module docstring)."""
    return Rate(ANSWER_BURST, ANSWER_EVERY * interval)


def defences(interval: float) -> Rate:
    """Re-announcements of the VIPs for one claimant (see the module docstring)."""
    return Rate(DEFENCE_BURST, DEFENCE_EVERY * interval)


def log_lines() -> Rate:
    return Rate(1, LOG_WINDOW)


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    # Allowed: how many of this key's events were refused since its last allowed one (then
    # reset). Refused: 0.
    suppressed: int = 0


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float
    refused: int = 0

    def fill(self, now: float, rate: Rate) -> None:
        if now > self.at:
            self.tokens = min(rate.burst, self.tokens + (now - self.at) / rate.every)
            self.at = now


@dataclass(slots=True)
class Limiter:
    """Token buckets per key and one shared by all keys (see the module docstring)."""

    rate: Rate
    shared_sources: int = SHARED_SOURCES  # the shared bucket: ``rate.shared(this)``
    max_keys: int = MAX_SOURCES
    refused: int = 0  # every refusal so far
    _buckets: dict[Hashable, _Bucket] = field(default_factory=dict)
    _shared: _Bucket | None = None

    def allow(self, now: float, key: Hashable) -> Verdict:
        """Spend a token of ``key`` (and of the shared bucket) if both have one."""
        rate = self.rate
        shared_rate = rate.shared(self.shared_sources)
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self.max_keys:
                # The quietest source goes: the one whose bucket changed longest ago.
                del self._buckets[min(self._buckets, key=lambda k: self._buckets[k].at)]
            bucket = self._buckets[key] = _Bucket(rate.burst, now)
        if self._shared is None:
            self._shared = _Bucket(shared_rate.burst, now)
        bucket.fill(now, rate)
        self._shared.fill(now, shared_rate)
        if bucket.tokens < 1 or self._shared.tokens < 1:
            bucket.refused += 1
            self.refused += 1
            return Verdict(False)
        bucket.tokens -= 1
        self._shared.tokens -= 1
        suppressed, bucket.refused = bucket.refused, 0
        return Verdict(True, suppressed)

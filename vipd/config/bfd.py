"""The ``announce.bgp.bfd`` section: BFD (RFC 5880/5881, `vipd.bfd`) beside each session of
the embedded BGP speaker, run in vipd's own process so that the BFD session and the
announcement share fate (docs/design/bfd.md).

What it must not do: open sockets or know the BGP side; the speaker's section
(``announce.bgp``) holds this one as its ``bfd`` key.

Where the rules come from
    - ``enabled`` defaults to false: a BFD session only comes Up if the router runs one for
      this node too (FRR: ``bfd`` / ``peer``, and ``neighbor … bfd``), and a speaker that
      waited for BFD to announce would otherwise announce nothing by default.
    - ``min_tx_ms`` / ``min_rx_ms``: bfd.DesiredMinTxInterval and bfd.RequiredMinRxInterval
      (RFC 5880 §6.8.1), in milliseconds like FRR's ``transmit-interval`` /
      ``receive-interval``; 50 to 60000. FRR goes down to 10 ms, but vipd's BFD runs on the
      agent's Python event loop, which cannot promise a period that short on a busy node: a
      late packet would be a false Down and a withdrawn route. 60000 is FRR's maximum.
    - ``multiplier``: bfd.DetectMult (§6.8.1), 2 to 255 as FRR's ``detect-multiplier``: 1
      would take the route away on a single lost packet.
    Defaults 100 ms × 3 (a 300 ms detection time), as the routed lab's FRR profile.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vipd.config.schema import flag, integer, spec

__all__ = ["Bfd"]

INTERVAL_MS = (50, 60000)


@dataclass(frozen=True, slots=True)
class Bfd:
    """``announce.bgp.bfd``: BFD with each BGP peer."""

    # run a BFD session with every BGP peer
    enabled: bool = field(default=False, metadata=spec(flag()))
    # ms; the fastest vipd will send (bfd.DesiredMinTxInterval)
    min_tx_ms: int = field(default=100, metadata=spec(integer(*INTERVAL_MS)))
    # ms; the fastest vipd accepts to receive (bfd.RequiredMinRxInterval)
    min_rx_ms: int = field(default=100, metadata=spec(integer(*INTERVAL_MS)))
    # missed packets before the peer's session is declared Down (bfd.DetectMult)
    multiplier: int = field(default=3, metadata=spec(integer(2, 255)))

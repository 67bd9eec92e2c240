"""The configuration of one virtual router on one node, as the state machine reads it.

What it is: :class:`Params`, checked on construction (RFC 9568 §5.2.4 and RFC 3768 §5.3.4
priority ranges, §5.2.7 / §5.3.7 interval ranges), with the knobs the RFCs leave to the
implementation: preemption and keepalived's ``preempt_delay`` (RFC 9568 §6.1 Preempt_Mode),
the start-up hold, the make-before-break lead and the release contest window (explained in
``vrrp.state``'s docstring).

What it must not do: read a config file or do any I/O. ``vipd.config`` turns the user's
document into these values; this module only refuses a combination the machine cannot run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address

from vipd.vrrp.timing import check_priority, check_version

IPAddress = IPv4Address | IPv6Address

__all__ = ["IPAddress", "Params"]


@dataclass(frozen=True, slots=True)
class Params:
    """Configuration of one virtual router on one node.

    ``advert_interval_cs`` is in centiseconds: v3 carries 1..4095 cs on the wire; v2 carries
    whole seconds, so it must be a multiple of 100 (1..255 s). ``primary_ip`` is the address
    our adverts are sent from, used for the equal-priority tie-break (RFC 9568 §6.4.3).
    ``preempt_delay`` (seconds, keepalived's knob) only makes sense with ``preempt``.
    """

    version: int
    priority: int
    advert_interval_cs: int
    primary_ip: IPAddress
    preempt: bool = True
    preempt_delay: float = 0.0
    # Make-before-break: seconds between our announcement and the advert that makes a live
    # lower-priority master step down (preemption, a healed split brain). 0 = the same call.
    preempt_lead: float = 0.002
    # Start-up hold (see the module docstring): no preemption of a live master before this
    # many seconds since start and this many adverts heard.
    startup_hold: float = 0.5
    startup_adverts: int = 3
    # After a priority-0 advert: seconds between our advert and binding the VIP, for a
    # better router's advert to reach us (equal priorities share one Skew_Time, so their
    # timers fire together). The old master keeps the VIP until our announcement. 0 = the
    # advert and the bind in the same call.
    release_contest: float = 0.004

    def __post_init__(self) -> None:
        check_version(self.version)
        # 255 is the address owner, 0 means "resigning": neither is a configured priority here.
        check_priority(self.priority, 1, 254)
        if self.version == 2:
            check_priority(self.advert_interval_cs, 100, 25500, "advert_interval_cs")
            if self.advert_interval_cs % 100:
                raise ValueError(
                    "advert_interval_cs must be a multiple of 100 for VRRPv2, whose wire "
                    f"format carries whole seconds (got {self.advert_interval_cs})"
                )
        else:
            check_priority(self.advert_interval_cs, 1, 4095, "advert_interval_cs")
        if not isinstance(self.primary_ip, IPv4Address | IPv6Address):
            raise TypeError(f"primary_ip must be an IP address (got {self.primary_ip!r})")
        if not math.isfinite(self.preempt_delay) or self.preempt_delay < 0:
            raise ValueError(f"preempt_delay must be >= 0 seconds (got {self.preempt_delay!r})")
        if not math.isfinite(self.preempt_lead) or not 0 <= self.preempt_lead < 0.01:
            raise ValueError(f"preempt_lead must be in [0, 0.01) s (got {self.preempt_lead!r})")
        if not math.isfinite(self.release_contest) or not 0 <= self.release_contest < 0.01:
            raise ValueError(
                f"release_contest must be in [0, 0.01) s (got {self.release_contest!r})"
            )
        if not math.isfinite(self.startup_hold) or not 0 <= self.startup_hold <= 10:
            raise ValueError(f"startup_hold must be in [0, 10] s (got {self.startup_hold!r})")
        if isinstance(self.startup_adverts, bool) or not 0 <= self.startup_adverts <= 10:
            raise ValueError(f"startup_adverts must be 0..10 (got {self.startup_adverts!r})")
        if self.preempt_delay > 0 and not self.preempt:
            raise ValueError(
                "preempt_delay needs preempt=True (without preemption it never applies)"
            )

"""After yielding to a higher-priority master: point the clients we moved at it.

What it is: the pure policy of the step-down that ends a split brain (RFC 9568 §6.4.3: an
Active router that hears a higher-priority advert becomes Backup and removes its addresses).
While we were Active our gratuitous ARP / unsolicited NA pointed every client at our MAC,
and RFC 9568 asks nothing of the router that stays Active when a lower-priority advert
arrives: keepalived and vipd re-announce then, FRR's vrrpd drops the advert silently, and the
clients keep sending to a MAC that no longer holds the VIP until their neighbour entry
times out (tens of seconds). So right after the VIP is removed the driver asks who holds it
now, by the same probe as an address-conflict check (RFC 5227 §2.1.1: ARP from 0.0.0.0;
RFC 4862 §5.4.2: a DAD Neighbor Solicitation from ``::``):

- IPv6: the holder answers a DAD solicitation with a Neighbor Advertisement to all nodes
  with Override set (RFC 4862 §5.4.3 and RFC 4861 §7.2.4), which re-points every client by
  itself: nothing more is sent.
- IPv4: the holder answers the probe to us alone (RFC 5227 §2.1.1), so its answer is
  relayed: one ARP announcement (RFC 5227 §3) of the VIP carrying the MAC that answered,
  sent from our own MAC (a switch must not learn the holder's MAC on our port).

Whoever holds the VIP answers with the MAC it wants the clients to use (RFC 9568 §7.3's
virtual MAC or its own); nothing is guessed. A master that announces itself as well
(keepalived, vipd) is not harmed: the relay carries its own MAC.

What it must not do: any I/O or read a clock; announce a MAC for anything but a VIP we
held and removed on this step-down, or after ``ANSWER_WINDOW``, or more than once per
step-down, or while we lead again; or act on any other step-down (a stop hands over
make-before-break, ``driver.handover``; a fault or a lost link has no master to point at).
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address

IPAddress = IPv4Address | IPv6Address

# A LAN answers a probe within a millisecond; a holder slower than this is left to the
# clients' own neighbour-entry timeout (and to its own announcements), and a late claim on
# the VIP is not taken for the answer.
ANSWER_WINDOW = 0.5


@dataclass(frozen=True, slots=True)
class Solicit:
    """Ask the wire who holds ``vip`` now (the shell's address-conflict probe)."""

    vip: IPAddress


@dataclass(frozen=True, slots=True)
class Relay:
    """Announce ``vip`` at ``mac``, the MAC that answered for it (IPv4)."""

    vip: IPv4Address
    mac: str


Action = Solicit | Relay


class YieldPolicy:
    """One virtual router's step-downs to a higher-priority master (see the module
    docstring)."""

    def __init__(self) -> None:
        self._asked: dict[IPAddress, float] = {}  # VIP -> when its holder was asked (IPv4)

    def on_step_down(
        self, now: float, vips: tuple[IPAddress, ...], *, preempted: bool, held: bool
    ) -> list[Action]:
        """We left Active. ``preempted``: for a higher-priority advert; ``held``: the VIPs
        were bound until this step-down (so clients may point at us)."""
        self._asked.clear()
        if not (preempted and held):
            return []
        for vip in vips:
            if isinstance(vip, IPv4Address):
                self._asked[vip] = now
        return [Solicit(vip) for vip in vips]

    def on_answer(self, now: float, vip: IPAddress, mac: str, *, leading: bool) -> list[Action]:
        """Another MAC claimed or answered for ``vip`` (IPv4) while we do not stop."""
        asked = self._asked.pop(vip, None)
        if leading or asked is None or now - asked > ANSWER_WINDOW:
            return []
        assert isinstance(vip, IPv4Address)  # only IPv4 VIPs are asked for an answer
        return [Relay(vip, mac)]

    @property
    def waiting(self) -> bool:
        return bool(self._asked)

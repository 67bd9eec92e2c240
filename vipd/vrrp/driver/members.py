"""A VRRP virtual router's unicast peers as membership (``vipd.membership``) changes them,
and the admission rule's hold (``vipd.membership.policy.Admission``).

What it is: `set_membership`, which ``VrrpElection.set_membership`` runs under the timers'
lock: the new peers become both the advert destinations and the sources accepted
(``vipd.vrrp.packet.Expectation.unicast_peers``) at once, so a peer is heard from the
moment it is in the set; a hold takes the node out of the election like a ``fault`` track
(the machine's shutdown: a leader resigns with a priority-0 advert, RFC 9568 §6.4.3), and
its end lets it join again as a backup (``Machine.start``).

What it must not do: decide the set or the hold (the policy does), switch between unicast
and multicast (decided at start: an empty set keeps the last peers), or touch the VIP.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from vipd import log as vlog
from vipd.vrrp.driver.wire import IPAddress

if TYPE_CHECKING:
    from vipd.vrrp.driver.election import VrrpElection


def set_membership(e: VrrpElection, peers: tuple[IPAddress, ...], held: bool, why: str) -> None:
    mine = tuple(p for p in peers if p.version == e.family and p != e.source)
    if mine and mine != e.unicast_peers:
        old = e.unicast_peers
        e.unicast_peers = mine
        e.expect = dataclasses.replace(e.expect, unicast_peers=frozenset(mine))
        if e.transport is not None:
            e.transport.destinations = mine
        e.adverts.cache.clear()  # the encoded adverts are per destination
        vlog.event(
            e.log,
            logging.INFO,
            "unicast peers changed",
            added=",".join(str(p) for p in mine if p not in old) or "-",
            removed=",".join(str(p) for p in old if p not in mine) or "-",
            peers=",".join(map(str, mine)),
        )
    if held == e.held:
        return
    e.follower.catch_up()
    now = e.clock()
    e.held = held
    if held:
        vlog.event(e.log, logging.WARNING, "membership: out of the election", why=why)
        e.apply(e.machine.shutdown(now), now)
    else:
        vlog.event(e.log, logging.INFO, "membership: joining the election", why=why)
        if e.link_up and not e._faulted and e._publish is not None:
            e.apply(e.machine.start(now), now)

"""The VRRP election backend (RFC 9568 / RFC 3768), one module per seam.

- ``election``: ``VrrpElection``, the port adapter the agent sees (``vipd.election``): set-up,
  the agent's events, adverts in and out, the machine's actions in order;
- ``timers``: the machine's single timer on the loop (a Backup's down timer finished on the
  socket), and below 0.1 s the Active's steady adverts from the pacer's thread;
- ``following``: quiet following, a Backup reading its master's unchanged adverts in batches;
- ``defence``: the claim watch while Active, carrying out the pure claim policy
  (``vipd.vrrp.claims``);
- ``handover``: make-before-break on a stop, on the injected clock;
- ``observe``: metrics, log lines and /status; ``wire``: the seams to the wire and the clock.

What it must not do: decide the election (``vipd.vrrp.state``) or the claim defence
(``vipd.vrrp.claims``), or decode packets (``vipd.vrrp.packet``).
"""

from vipd.vrrp.claims import (
    CLAIM_DEFER_MAX,
    CLAIM_SETTLE,
    CLAIMANT_PROBE_MAX_GAP,
    CLAIMANT_PROBE_WAIT,
    DEFEND_INTERVAL,
    SPLIT_BRAIN_ADVERTS,
)
from vipd.vrrp.driver.election import VrrpElection
from vipd.vrrp.driver.timers import TIMER_SLACK

__all__ = [
    "CLAIMANT_PROBE_MAX_GAP",
    "CLAIMANT_PROBE_WAIT",
    "CLAIM_DEFER_MAX",
    "CLAIM_SETTLE",
    "DEFEND_INTERVAL",
    "SPLIT_BRAIN_ADVERTS",
    "TIMER_SLACK",
    "VrrpElection",
]

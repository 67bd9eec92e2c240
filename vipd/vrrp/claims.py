"""Claim defence while Active: what to do when another MAC claims a VIP we hold.

What it is: the pure policy behind the VRRP driver's claim watch (RFC 5227 §2.4, with the
VRRP split brain of RFC 9568 §6.4.3 in mind). A :class:`ClaimPolicy` is fed what the shell
sees, with ``now`` and the facts of the moment (:class:`Lead`): an ARP claim on the VIP by
another MAC (:meth:`ClaimPolicy.on_claim`), a lower-priority advert of our VRID while we lead
with the VIP bound (:meth:`ClaimPolicy.on_advert`), one of its own timers firing
(:meth:`ClaimPolicy.on_timer`) and whether a probe it asked for went out
(:meth:`ClaimPolicy.on_probe`). Each returns a list of actions (:class:`Announce`,
:class:`Counted`, :class:`Warn`, :class:`Schedule`, :class:`Cancel`, :class:`Probe`) for the
shell to perform in order.

What it must not do: any I/O, read a clock, or decide the election: the only thing it ever
asks for on the wire is an announcement of a VIP this node already holds, and a unicast ARP
probe to a claimant.

The rules:

- A claim within ``SPLIT_BRAIN_ADVERTS`` intervals of a lower-priority advert of our VRID is
  that peer's split brain: it bound the VIP and announced it just before our answer to its
  advert made it step down. It is answered at once (at most once per interval), whatever
  the foreign-host budget says. A claim within ``PEER_CLAIM_WINDOW`` after such an advert,
  or one that such an advert follows within the split-brain window (a vipd peer announces
  just before it advertises), shows its MAC to be the peer's: that MAC's later claims are
  answered the same way, and a defence charged to it is refunded.
- Anything else is a foreign host (RFC 5227 §2.4 (b)): defended with one announcement at
  most every ``DEFEND_INTERVAL``, ``CLAIM_SETTLE`` after its latest frame (but no later than
  ``CLAIM_DEFER_MAX`` after its first) and only if we still lead then: a returning
  higher-priority node announces before its preempting advert (make-before-break). While we
  take over from a live master its replies are expected, not a claim.
- A claimant whose announcement may be the clients' latest (a peer's, answered while its
  burst went on, or one the budget left unanswered) is followed: while we lead, its MAC is
  asked by a unicast ARP probe whether it still has the VIP, an interval (and
  ``CLAIM_SETTLE``) after its claim, ``CLAIMANT_PROBES_AT_ADVERT`` times an interval apart,
  then at doubling gaps up to ``CLAIMANT_PROBE_MAX_GAP``. No answer within
  ``CLAIMANT_PROBE_WAIT``: clients it moved would time out on its MAC, so we announce (no
  conflict is left, the budget is not charged). Still answering ``DEFEND_INTERVAL`` after
  its claim: judged as a new claim.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# RFC 5227 §2.4 (b): defend the address at most once per DEFEND_INTERVAL seconds.
DEFEND_INTERVAL = 10.0
# A claim within this many advert intervals of a lower-priority advert of our own VRID is
# that peer's split brain, not a foreign host: answered at once (once per advert interval).
SPLIT_BRAIN_ADVERTS = 3
# A router sends its gratuitous ARP in the same moment as its advert (vipd just before it,
# keepalived just after): a claim this soon after a lower-priority advert of our VRID shows the
# claimant's MAC to be that peer's, remembered for its later claims. Tight, so that a foreign
# host's claim that merely falls inside the split-brain window (after a preemption, say) is
# not taken for a peer's.
PEER_CLAIM_WINDOW = 0.05
# A foreign claim is defended this long after it is seen, if we still lead then: a returning
# higher-priority node announces first and advertises a preempt_lead later
# (make-before-break), and our defence must not pull the clients back in between. Also how
# long after becoming active a claim is expected (the old master's last ARP replies).
CLAIM_SETTLE = 0.02
# A claimant announces in a burst (``garp.repeat`` frames ``garp.interval`` apart, 40 ms by
# default): the defence waits for CLAIM_SETTLE after its latest frame, so that ours is the
# announcement clients keep, but never more than this after the first.
CLAIM_DEFER_MAX = 0.25
# A VRRP peer steps down on our next advert that reaches it and stops answering (under 30 %
# loss, 97 % of them within three). A reply on a LAN takes well under a millisecond; the
# shell drains the watch before the verdict, so a stalled loop does not miss one.
CLAIMANT_PROBE_WAIT = 0.02
CLAIMANT_PROBES_AT_ADVERT = 3
CLAIMANT_PROBE_MAX_GAP = 1.0
# Peers and claimants remembered (multicast: anyone on our VRID could show up).
MAX_PEERS = 64

# The policy's timers: the one pending defence, and one per followed claimant.
DEFENCE = "defence"


def claimant_key(mac: str) -> str:
    return f"claimant {mac}"


@dataclass(frozen=True, slots=True)
class Lead:
    """The shell's facts at the moment of a call."""

    leading: bool  # Active, not stopping or handing over, a VIP bound
    interval: float  # our advert interval, seconds
    lead_pending: bool = False  # preempting a live master: our advert not sent yet
    active_since: float | None = None  # when the machine last became Active


@dataclass(frozen=True, slots=True)
class Announce:
    """Announce every bound VIP again; ``reason`` is logged ("re-announcing") unless None.
    The shell holds announcements to a per-claimant budget (``vrrp.ratelimit``), and their
    log lines too while they answer the claimant's own frames (``answers_claim``); not for
    a claimant that went quiet, whose stranded clients only our probes find."""

    reason: str | None
    claimant_mac: str
    answers_claim: bool = True


@dataclass(frozen=True, slots=True)
class Counted:
    """A claim counted (vipd_vip_duplicate_claims_total{source})."""

    source: str  # "arp" or "vrrp"


@dataclass(frozen=True, slots=True)
class Warn:
    """A foreign host's claim, to be logged (rate-limited: 1, 2, 4, 8, … and every defence)."""

    claimant_mac: str
    count: int
    defending: bool


@dataclass(frozen=True, slots=True)
class Schedule:
    """Call :meth:`ClaimPolicy.on_timer` with ``key`` ``delay`` seconds from now (replacing
    a timer of that key). ``drain``: read the claim watches first (an answer may wait)."""

    key: str
    delay: float
    drain: bool = False


@dataclass(frozen=True, slots=True)
class Cancel:
    key: str


@dataclass(frozen=True, slots=True)
class Probe:
    """Send a unicast ARP probe for the VIP to ``mac``; tell :meth:`ClaimPolicy.on_probe`
    whether it went out."""

    mac: str


Action = Announce | Counted | Warn | Schedule | Cancel | Probe

_PEER_REASON = "a lower-priority peer of our VRID announced the VIP"
_STRANDED_REASON = (
    "a claimant of the VIP no longer answers for it: clients it moved would time out on its MAC"
)


@dataclass(slots=True)
class _Check:
    """A claimant followed until it lets the VIP go."""

    ends: float  # DEFEND_INTERVAL after its claim: an answer then is judged as a new claim
    gap: float  # until the next probe
    probed_at: float | None = None  # the probe out, its answer awaited
    answered: bool = False
    asked: int = 0


@dataclass(slots=True)
class ClaimPolicy:
    """The claim defence of one virtual router (see the module docstring)."""

    claims: int = 0  # every claim counted, ARP and VRRP
    claimed_at: float | None = None  # the last one
    _defended_at: float | None = None  # the last foreign defence
    _vrrp_claim_at: float | None = None  # the last lower-priority advert while we led
    _split_answered_at: float | None = None  # the last answer to a split-brain claim
    _defence: str | None = None  # the MAC a pending defence is for
    _defence_first: float = 0.0  # when the first claim of the pending defence came
    # MACs that claimed the VIP next to a lower-priority advert of our VRID: the other side
    # of a split brain (MAC -> when it last showed itself a peer's).
    _peer_macs: dict[str, float] = field(default_factory=dict)
    _foreign_seen: tuple[float, str] | None = None  # the last unexplained claim
    # The last foreign defence: (claimant MAC, the budget before it), refunded if that MAC
    # turns out to be a peer's.
    _charged: tuple[str, float | None] | None = None
    _checks: dict[str, _Check] = field(default_factory=dict)

    # -- inputs ---------------------------------------------------------------------------

    def on_claim(self, now: float, mac: str, lead: Lead) -> list[Action]:
        """Another MAC announced or answered for the VIP."""
        if not lead.leading:
            return []  # a new leader's announcement after we stepped down: the normal case
        check = self._checks.get(mac)
        if check is not None and check.probed_at is not None:
            # The answer to our probe: it still has the VIP. Not a new claim.
            check.answered = True
            return []
        recent = self._vrrp_claim_at
        if recent is not None and now - recent <= PEER_CLAIM_WINDOW:
            self._learn_peer(mac, now)
        split = recent is not None and now - recent <= SPLIT_BRAIN_ADVERTS * lead.interval
        if split or mac in self._peer_macs:
            # First, also inside our own lead window: that is exactly when the other
            # router's announcement, sent just before our answer reached it, lands.
            out = self._count("arp", now)
            return out + self._answer_peer(mac, now, lead) + self._check_claimant(mac, now, lead)
        self._foreign_seen = (now, mac)
        since = lead.active_since
        if lead.lead_pending or (since is not None and now - since < CLAIM_SETTLE):
            # Taking over from a live master, which answers until our advert reaches it
            # (make-before-break): its replies are expected, not a claim.
            return []
        if self._defence is None:
            self._defence_first = now
        elif now - self._defence_first >= CLAIM_DEFER_MAX:
            return []
        # (Else still inside the claimant's burst: a defence sent in the middle of it is
        # overwritten by its next frame, so it moves to CLAIM_SETTLE after this one.)
        self._defence = mac
        return [Schedule(DEFENCE, CLAIM_SETTLE)]

    def on_advert(self, now: float, interval: float) -> list[Action]:
        """A lower-priority advert of our VRID (priority > 0) while we lead with the VIP
        bound: another node claims it too (a split brain, healing or not)."""
        self._vrrp_claim_at = now
        out = self._count("vrrp", now)
        seen = self._foreign_seen
        if seen is not None and now - seen[0] <= SPLIT_BRAIN_ADVERTS * interval:
            # The claim came first: a vipd peer announces just before it advertises, and
            # under loss its first adverts may be lost. A foreign host's claim is not
            # followed by adverts, so this window can be as wide as the split brain's.
            self._foreign_seen = None
            self._learn_peer(seen[1], now)
            if self._charged is not None and self._charged[0] == seen[1]:
                self._defended_at = self._charged[1]
                self._charged = None
        return out

    def on_timer(self, now: float, key: str, lead: Lead) -> list[Action]:
        """A timer the policy scheduled fired."""
        if key == DEFENCE:
            mac, self._defence = self._defence, None
            return [] if mac is None else self._judge(mac, now, lead)
        mac = key.removeprefix("claimant ")
        check = self._due(mac, lead)
        if check is None:
            return []
        if check.probed_at is None:
            check.probed_at, check.answered = now, False
            return [Probe(mac)]
        return self._verdict(mac, now, lead, asked=True)

    def on_probe(self, now: float, mac: str, sent: bool, lead: Lead) -> list[Action]:
        """Whether the probe of a ``Probe`` action went out (if not, the shell drains the
        claim watches first, as before a verdict)."""
        if mac not in self._checks:
            return []
        if sent:
            return [Schedule(claimant_key(mac), CLAIMANT_PROBE_WAIT, drain=True)]
        return self._verdict(mac, now, lead, asked=False)

    def end(self) -> list[Action]:
        """The election is over for this run: every pending timer cancelled."""
        out: list[Action] = [Cancel(claimant_key(mac)) for mac in self._checks]
        self._checks.clear()
        if self._defence is not None:
            self._defence = None
            out.append(Cancel(DEFENCE))
        return out

    # -- reads ----------------------------------------------------------------------------

    def duplicate_claim(self, now: float, held: bool, interval: float) -> bool:
        """vipd_vip_duplicate_claim: a claim within three intervals while we hold the VIP."""
        claimed = self.claimed_at
        return held and claimed is not None and now - claimed <= 3 * interval

    # -- internals ------------------------------------------------------------------------

    def _count(self, source: str, now: float) -> list[Action]:
        self.claimed_at = now
        self.claims += 1
        return [Counted(source)]

    def _learn_peer(self, mac: str, now: float) -> None:
        if mac not in self._peer_macs and len(self._peer_macs) >= MAX_PEERS:
            del self._peer_macs[min(self._peer_macs, key=self._peer_macs.__getitem__)]
        self._peer_macs[mac] = now

    def _answer_peer(self, mac: str, now: float, lead: Lead) -> list[Action]:
        """A split-brain peer's claim: re-announce at once, at most once per interval."""
        answered = self._split_answered_at
        if answered is not None and now - answered < lead.interval:
            return []
        self._split_answered_at = now
        return [Announce(_PEER_REASON, mac)]

    def _judge(self, mac: str, now: float, lead: Lead) -> list[Action]:
        if not lead.leading:
            return []  # it was a higher-priority node moving the clients before its advert
        out = self._count("arp", now)
        if mac in self._peer_macs:  # its advert came while the defence waited
            return out + self._answer_peer(mac, now, lead) + self._check_claimant(mac, now, lead)
        defend = self._defended_at is None or now - self._defended_at >= DEFEND_INTERVAL
        n = self.claims
        if defend or n & (n - 1) == 0:  # 1, 2, 4, 8, …: a storm cannot flood the log
            out.append(Warn(mac, n, defend))
        if not defend:
            return out + self._check_claimant(mac, now, lead)
        self._charged = (mac, self._defended_at)
        self._defended_at = now
        if self._checks.pop(mac, None) is not None:  # ours is the clients' latest now
            out.append(Cancel(claimant_key(mac)))
        out.append(Announce(None, mac))
        return out

    def _check_claimant(self, mac: str, now: float, lead: Lead) -> list[Action]:
        if mac in self._checks or len(self._checks) >= MAX_PEERS:
            return []  # already followed; or a flood of MACs, each held to the budget alone
        gap = lead.interval
        self._checks[mac] = _Check(ends=now + DEFEND_INTERVAL, gap=gap)
        # A peer steps down on our first advert after its claim, at most an interval later.
        return [Schedule(claimant_key(mac), gap + CLAIM_SETTLE)]

    def _due(self, mac: str, lead: Lead) -> _Check | None:
        """A check's timer fired: the check, unless we no longer lead (then it is over)."""
        check = self._checks.get(mac)
        if check is None:
            return None
        if not lead.leading:
            del self._checks[mac]
            return None
        return check

    def _verdict(self, mac: str, now: float, lead: Lead, *, asked: bool) -> list[Action]:
        """After the probe's wait: an answer (any claim from that MAC since the probe went
        out) means it still has the VIP; none, that clients it moved are stranded."""
        if (check := self._due(mac, lead)) is None:
            return []
        if asked and not check.answered:
            del self._checks[mac]
            return [Announce(_STRANDED_REASON, mac, answers_claim=False)]
        check.probed_at = None
        if asked and now >= check.ends:
            # Still there DEFEND_INTERVAL on: its answer is a claim, judged as one (the
            # budget spent before the check began is renewed by now).
            del self._checks[mac]
            return self._judge(mac, now, lead)
        check.asked += 1
        if check.asked >= CLAIMANT_PROBES_AT_ADVERT:
            check.gap = min(2 * check.gap, CLAIMANT_PROBE_MAX_GAP)
        return [Schedule(claimant_key(mac), check.gap)]

"""vipd.lease.logic against the faults of a real control plane, on a fake clock.

Each timeline runs 3 electors on tests/unit/lease_sim.py's in-memory store with the fault as
vipd sees it (docs/design/lease-unreachable.md has the table these tests check): the
invariant is **never two VIP holders**, and **no holder for at most the documented bound**.
The sweeps run one fault over many outage lengths, because the defects they guard against
only show for some phases of the retry timers.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.unit.lease_sim import Sim
from vipd.lease.logic import Elector
from vipd.lease.model import (
    REQUEST_FRACTION,
    BecomeFollower,
    Conflict,
    NotFound,
    Ok,
    Params,
    PeerState,
    Purpose,
    Record,
    Rejected,
    Request,
    Role,
    Send,
    StoreRefused,
    Unavailable,
    Unreachable,
    Verb,
    classify,
)

NOSPACE = "etcdserver: mvcc: database space exceeded"
NAMES = ["n1", "n2", "n3"]


def timing(d: float, rd: float, rp: float) -> Callable[[str], Params]:
    return lambda n: Params(identity=n, duration=d, renew_deadline=rd, retry_period=rp)


def cap(rd: float) -> float:
    """The core's per-request timeout cap (a hung request is abandoned after this)."""
    return max(0.2, rd * REQUEST_FRACTION)


def short(rd: float, rp: float) -> float:
    """A follower's request timeout."""
    return max(0.2, min(cap(rd), rp))


def leader_after(sim: Sim, t: float) -> str:
    sim.run_until(t)
    (old,) = sim.leaders()
    return old


def longest_gap(sim: Sim, after: float) -> float:
    return max((b - a for a, b in sim.gaps(after)), default=0.0)


# -- classify: the driver's mapping of an HTTP error ------------------------------------------


def test_classify_maps_http_errors() -> None:
    assert classify(0, "timed out") == Unreachable("timed out")
    assert classify(404, "") == NotFound()
    assert classify(409, "") == Conflict()
    assert classify(403, "forbidden") == Rejected(403, "forbidden")
    assert classify(422, "rv") == Rejected(422, "rv")
    assert classify(503, "etcdserver: request timed out") == Unavailable(
        503, "etcdserver: request timed out"
    )
    # etcd's NOSPACE alarm, as the API server relays it (the quota check's own error, and
    # the capped applier's once the alarm is raised): the same for every member.
    assert classify(500, NOSPACE) == StoreRefused(500, NOSPACE)
    assert isinstance(classify(500, f"Internal error occurred: {NOSPACE}"), StoreRefused)
    assert isinstance(classify(500, "etcdserver: no space"), StoreRefused)


def test_a_429_is_never_store_wide() -> None:
    """429 comes from this API server's own Priority and Fairness, whatever its text says."""
    assert classify(429, NOSPACE) == Unavailable(429, NOSPACE)
    assert classify(429, "Too many requests") == Unavailable(429, "Too many requests")


# -- 1. the leader's own API server fails, the peers' work: client-go's rule -----------------


@pytest.mark.parametrize("fault", ["5xx", "429"])
def test_leader_only_failure_steps_down_at_the_renew_deadline(fault: str) -> None:
    """The leader's etcd member cut off from the quorum (503 here, /readyz not ready there),
    or its API server's Priority and Fairness rejecting vipd (429, /readyz ready): the peers
    can write, so the leader must let go at its renew deadline, before anyone may take over."""
    sim = Sim(NAMES, timing(15, 10, 2))
    old = leader_after(sim, 5.0)
    sim.nodes[old].fault = fault
    sim.run_until(120.0)
    assert sim.overlap_time() == 0.0 and not sim.overlaps()
    (new,) = sim.leaders()
    assert new != old
    last = max(t for t, h, _ in sim.store.writes if h == old)
    down = next(t for t, n, lead in sim.timeline if n == old and not lead)
    assert down == pytest.approx(last + 10.0, abs=0.01)
    # No holder from the step-down until the peer's take-over: duration - renew deadline,
    # plus at most one retry period.
    assert longest_gap(sim, 5.0) <= 15 - 10 + 2 + 0.05


def test_partitioned_leader_with_live_processes_steps_down_and_heals_cleanly() -> None:
    sim = Sim(NAMES, timing(15, 10, 2), arp=True)
    old = leader_after(sim, 5.0)
    sim.nodes[old].fault = "partition"
    sim.run_until(60.0)
    (new,) = [n for n in sim.leaders()]
    assert new != old
    sim.nodes[old].fault = ""
    sim.run_until(120.0)
    assert sim.leaders() == [new]
    assert not sim.overlaps()
    assert longest_gap(sim, 5.0) <= 15 - 10 + 2 + 0.05


@pytest.mark.parametrize("election", [1.0, 2.0, 3.0])
@pytest.mark.parametrize("views", [False, True])
def test_partitioned_leader_whose_etcd_member_led_etcd(election: float, views: bool) -> None:
    """The partitioned (or dead) leader's etcd member led etcd: the survivors' API servers
    answer nothing until their members elect a new leader (``election`` seconds). The
    followers' reads failed, so each counts the unchanged record from its first good read
    and binds a retry period and two requests after its write (the unreachable-store rule's
    follower side): no holder for up to E + D - RD + 3 RP + 4 r from the step-down
    (docs/design/lease-unreachable.md, fault 6), never two holders. Swept over the phase of
    the leader's renewal."""
    d, rd, rp = 5.0, 3.0, 1.0
    r = short(rd, rp)
    worst = 0.0
    for tenth in range(10):
        sim = Sim(NAMES, timing(d, rd, rp), arp=True, views=views)
        t = 5.0 + tenth / 10
        old = leader_after(sim, t)
        sim.nodes[old].fault = "partition"
        others = [n for n in NAMES if n != old]
        for n in others:
            sim.nodes[n].fault = "store-hang"
        sim.run_until(t + election)
        for n in others:
            sim.nodes[n].fault = ""
        sim.run_until(t + 40.0)
        assert not sim.overlaps() and sim.overlap_time() == 0.0
        assert len(sim.leaders()) == 1 and old not in sim.leaders()
        gap = longest_gap(sim, t - 0.01)
        assert gap <= election + d - rd + 3 * rp + 4 * r + 0.05, (tenth, gap)
        worst = max(worst, gap)
    # The rule costs something here: more than the undisturbed D - RD + RP in some phase.
    assert worst > d - rd + rp + 0.05


def test_stalled_leader_api_server_steps_down() -> None:
    """SIGSTOP of the leader's kube-apiserver: no answers at all (and no /readyz either)."""
    sim = Sim(NAMES, timing(15, 10, 2))
    old = leader_after(sim, 5.0)
    sim.nodes[old].fault = "blackhole"
    sim.run_until(60.0)
    assert sim.leaders() and sim.leaders() != [old]
    assert not sim.overlaps()


# -- 1. positive evidence that nobody else can lead ---------------------------------------------


def test_whole_store_down_with_every_peer_not_ready_the_leader_keeps_the_vip() -> None:
    sim = Sim(NAMES, timing(15, 10, 2))
    old = leader_after(sim, 5.0)
    for n in sim.nodes.values():
        n.fault = "5xx"
    sim.run_until(100.0)
    assert sim.leaders() == [old]
    assert sim.nodes[old].elector.role is Role.HOLDING
    assert any(w.startswith("hold:") for _, w in sim.nodes[old].log)
    for n in sim.nodes.values():
        n.fault = ""
    sim.run_until(140.0)
    assert sim.leaders() == [old] and sim.nodes[old].elector.role is Role.LEADER
    assert [e for e in sim.timeline if e[0] > 5.0] == []  # not one role change, no gap
    assert not sim.overlaps()


def test_without_peer_information_the_leader_steps_down_like_client_go() -> None:
    """No health section, no peers listed: nothing is known of the others, so nothing is
    evidence; the store rule is client-go's."""
    sim = Sim(NAMES, timing(15, 10, 2), views=False)
    old = leader_after(sim, 5.0)
    for n in sim.nodes.values():
        n.fault = "5xx"
    sim.run_until(40.0)
    assert sim.leaders() == []
    for n in sim.nodes.values():
        n.fault = ""
    sim.run_until(80.0)
    assert len(sim.leaders()) == 1 and not sim.overlaps()
    assert old in [n for _, n, _ in sim.timeline]


def test_a_lone_node_keeps_the_vip_through_a_store_outage() -> None:
    sim = Sim(["n1"], timing(15, 10, 2))
    leader_after(sim, 5.0)
    sim.nodes["n1"].fault = "5xx"
    sim.run_until(100.0)
    assert sim.leaders() == ["n1"] and sim.nodes["n1"].elector.role is Role.HOLDING


def test_a_peer_that_is_only_unreachable_is_not_evidence() -> None:
    """From the leader's side a partition looks like peers that do not answer: that proves
    nothing about them, so the leader steps down even with its own store 5xx."""
    sim = Sim(NAMES, timing(15, 10, 2))
    old = leader_after(sim, 5.0)
    sim.nodes[old].fault = "5xx"
    others = [n for n in NAMES if n != old]
    sim.nodes[others[0]].fault = "blackhole"
    sim.nodes[others[1]].fault = "5xx"
    sim.run_until(40.0)
    assert old not in sim.leaders()
    assert not sim.overlaps()


def test_the_holding_leader_lets_go_as_soon_as_a_peer_is_ready() -> None:
    sim = Sim(NAMES, timing(15, 10, 2))
    old = leader_after(sim, 5.0)
    for n in sim.nodes.values():
        n.fault = "5xx"
    sim.run_until(40.0)
    assert sim.nodes[old].elector.role is Role.HOLDING
    other = next(n for n in NAMES if n != old)
    sim.nodes[other].fault = ""  # that peer's member is back in the quorum; ours is not
    sim.run_until(40.01)
    assert sim.leaders() == []  # at once: the peer may be able to write the Lease now
    sim.run_until(100.0)
    assert sim.leaders() == [other] and not sim.overlaps()


def test_stale_evidence_is_caught_on_the_wire() -> None:
    """The leader's view of its peers lags (a slow checker): it holds on "every peer not
    ready" after they recovered. A peer takes over; its gratuitous ARP makes the holding
    leader yield at once instead of both answering for the VIP until the view catches up."""

    def run(arp: bool) -> float:
        sim = Sim(NAMES, timing(15, 10, 2), view_lag=0.0, arp=arp)
        old = leader_after(sim, 5.0)
        for n in sim.nodes.values():
            n.fault = "5xx"
        sim.run_until(30.0)
        assert sim.nodes[old].elector.role is Role.HOLDING
        sim.view_lag = 60.0  # from now on, every view arrives a minute late
        for n in sim.nodes.values():
            if n.name != old:
                n.fault = ""
        sim.run_until(120.0)
        assert len(sim.leaders()) == 1
        return sim.overlap_time()

    assert run(arp=True) <= 0.002
    assert run(arp=False) > 1.0  # what the wire saves: the view's whole lag


def test_foreign_claim_makes_any_holder_yield_and_never_defend() -> None:
    e = Elector(Params(identity="n1", duration=5, renew_deadline=3, retry_period=1))
    s = e.poll(0.0, True)
    (req,) = [a.request for a in s if isinstance(a, Send)]
    (req,) = [a.request for a in e.on_result(0.0, req.id, NotFound(), True) if isinstance(a, Send)]
    e.on_result(0.0, req.id, Ok(Record("1", "n1", 5)), True)
    assert e.leader
    (down,) = e.foreign_claim(0.5)
    assert isinstance(down, BecomeFollower) and down.label == "foreign-claim" and not e.leader
    assert e.foreign_claim(0.6) == []  # a follower has nothing to give up
    # Not a defence: nothing is sent. The next round reads the Lease, and takes it back
    # only if it is still ours (the other claimant then yields to our announcement).
    s = e.poll(e.wake_at, True)
    (req,) = [a.request for a in s if isinstance(a, Send)]
    assert req.verb is Verb.GET


# -- 2. writes-only outage (etcd NOSPACE): reads work, writes fail everywhere -----------------


@pytest.mark.parametrize("length", [round(4.0 + 1.37 * i, 2) for i in range(40)])
def test_writes_only_outage_never_makes_two_holders(length: float) -> None:
    """15/10/2, etcd's NOSPACE alarm from 6.1 s for ``length`` seconds: before the fix 14 of
    these 40 lengths gave two holders for up to 1.5 s (a follower took the Lease the moment
    writes returned, while the old leader still kept the VIP on "every call is a 5xx")."""
    sim = Sim(NAMES, timing(15, 10, 2))
    old = leader_after(sim, 5.0)
    sim.run_until(6.1)
    sim.store.nospace = True
    sim.run_until(6.1 + length)
    assert sim.leaders() in ([old], [])  # nobody else: nobody can write the Lease
    sim.store.nospace = False
    sim.run_until(6.1 + length + 60.0)
    assert sim.overlap_time() == 0.0 and not sim.overlaps()
    assert len(sim.leaders()) == 1
    # No holder at most from the renew deadline until the reclaim, or until a follower's
    # take-over just before it and its wait for the old holder's next read.
    r = short(10, 2)
    assert longest_gap(sim, 5.0) <= (15 - 10) + 2 + 3 * r + 2 + 2 * r + 2 + 0.1


def test_writes_only_outage_keeps_the_vip_once_every_follower_had_its_chance() -> None:
    sim = Sim(NAMES, timing(15, 10, 2))
    old = leader_after(sim, 5.0)
    sim.store.nospace = True
    sim.run_until(300.0)
    assert sim.leaders() == [old] and sim.nodes[old].elector.role is Role.HOLDING
    gaps = sim.gaps(5.0)
    assert len(gaps) == 1  # one stretch, from the renew deadline until the reclaim
    sim.store.nospace = False
    sim.run_until(340.0)
    assert sim.leaders() == [old] and sim.nodes[old].elector.role is Role.LEADER
    assert len(sim.gaps(5.0)) == 1 and not sim.overlaps()


def test_writes_only_outage_with_the_leader_dead_a_peer_takes_over_after_it() -> None:
    sim = Sim(NAMES, timing(15, 10, 2))
    old = leader_after(sim, 5.0)
    sim.store.nospace = True
    sim.run_until(8.0)
    sim.kill(old)
    sim.run_until(60.0)
    assert sim.leaders() == []
    sim.store.nospace = False
    sim.run_until(120.0)
    (new,) = sim.leaders()
    took = sim.became_leader(new, 60.0)
    assert took is not None
    # Within a duration after the writes return (its observation restarted at its last
    # refused write), plus the wait that lets a possibly holding old leader see it.
    assert took - 60.0 <= 15 + 2 + 2 + 2 * short(10, 2) + 0.1
    assert not sim.overlaps()


def test_a_refused_write_resets_the_followers_observation() -> None:
    e = Elector(Params(identity="n2", duration=5, renew_deadline=3, retry_period=1))

    def one(now: float, outcome: object) -> list[Request]:
        acts = e.poll(now, True)
        out: list[Request] = []
        for a in acts:
            if isinstance(a, Send):
                r = a.request
                more = e.on_result(now, r.id, outcome if r.verb is not Verb.GET else ok, True)  # type: ignore[arg-type]
                out += [r] + [m.request for m in more if isinstance(m, Send)]
        return out

    ok = Ok(Record("7", "n1", 5))
    one(0.0, ok)
    # Expired at 5.0: it tries to take the Lease, the store refuses the write.
    reqs = one(5.0, None)
    (w,) = [r for r in reqs if r.verb is Verb.UPDATE]
    assert e.on_result(5.0, w.id, StoreRefused(500, NOSPACE), True) == []
    # The next read of the same record counts as a first sighting: 5 s more to wait.
    one(e.wake_at, ok)
    assert e.expires_at() == pytest.approx(e.observed_at + 5.0)  # type: ignore[operator]
    assert e.observed_at is not None and e.observed_at > 5.0


# -- 3. a successful read after a long blind spell ---------------------------------------------


@pytest.mark.parametrize(
    ("fault", "error_delay", "jitters"),
    [
        ("5xx", 1.0, {"n1": 0.9, "n2": 0.0, "n3": 0.6}),
        ("5xx", 0.0, {"n1": 0.0, "n2": 0.9, "n3": 0.3}),
        ("5xx", 3.0, {}),
        ("blackhole", 0.0, {"n1": 0.9, "n2": 0.0, "n3": 0.6}),
        ("store-hang", 0.0, {"n1": 0.9, "n2": 0.0, "n3": 0.6}),
    ],
)
def test_whole_store_outage_of_any_length_never_makes_two_holders(
    fault: str, error_delay: float, jitters: dict[str, float]
) -> None:
    """12/10/2 (legal: 12 > 10 > 2.4), every API server failing the same way for 0.5 to
    80 s; with 503s answered 1 s late and these jitters, 2 of the 160 lengths gave two
    holders for ~1 s before the fix (a follower blind for 11.9 s whose last failure came
    before the renew deadline kept its old observation)."""
    bad: list[tuple[float, float]] = []
    for i in range(160):
        length = 0.5 + i * 0.5
        sim = Sim(NAMES, timing(12, 10, 2), error_delay=error_delay, jitters=jitters)
        leader_after(sim, 5.0)
        for n in sim.nodes.values():
            n.fault = fault
        sim.run_until(5.0 + length)
        for n in sim.nodes.values():
            n.fault = ""
        sim.run_until(5.0 + length + 40.0)
        if sim.overlaps():
            bad.append((length, sim.overlap_time()))
        assert len(sim.leaders()) == 1
        if fault != "blackhole":
            # Every API server answers its etcd check not ready: the leader holds. A gap only
            # when the store came back just before the deadline and the renewal had not
            # landed yet: it steps down and takes its own record back at its next round.
            # (Stalled API servers answer nothing at all: client-go's rule, a real gap.)
            assert longest_gap(sim, 5.0) <= 2.0 + 0.05, length
            if length > 10.0 + 2.0 + error_delay:
                assert longest_gap(sim, 5.0) == 0.0, length
    assert bad == []


def test_a_read_after_a_long_blind_spell_restarts_the_observation() -> None:
    """Blind from 0 to 11 s with the failures all before the renew deadline (a request hung
    until its timeout, then a long wait): the first good read still counts as a first
    sighting."""
    e = Elector(Params(identity="n2", duration=12, renew_deadline=10, retry_period=2))
    acts = e.poll(0.0, True)
    (r,) = [a.request for a in acts if isinstance(a, Send)]
    e.on_result(0.0, r.id, Ok(Record("7", "n1", 12)), True)
    acts = e.poll(2.0, True)
    (r,) = [a.request for a in acts if isinstance(a, Send)]
    e.on_result(7.0, r.id, Unreachable("timed out"), True)  # 5 s later: before 10 s
    acts = e.poll(11.0, True)
    (r,) = [a.request for a in acts if isinstance(a, Send)]
    e.on_result(11.0, r.id, Ok(Record("7", "n1", 12)), True)
    assert e.expires_at() == pytest.approx(23.0)  # not 12.0


# -- 4. a leader renewing a released Lease counts a transition --------------------------------


def test_leader_renewing_a_released_lease_counts_a_transition() -> None:
    e = Elector(Params(identity="n1", duration=5, renew_deadline=3, retry_period=1))
    (r,) = [a.request for a in e.poll(0.0, True) if isinstance(a, Send)]
    (r,) = [a.request for a in e.on_result(0.0, r.id, NotFound(), True) if isinstance(a, Send)]
    e.on_result(0.0, r.id, Ok(Record("1", "n1", 5, transitions=4)), True)
    (r,) = [a.request for a in e.poll(1.0, True) if isinstance(a, Send)]
    (r,) = [a.request for a in e.on_result(1.0, r.id, Conflict(), True) if isinstance(a, Send)]
    # Someone cleared the holder (kubectl edit, or a release): client-go's tryAcquireOrRenew
    # sees a record that is not ours and counts a new term.
    (w,) = [
        a.request
        for a in e.on_result(1.0, r.id, Ok(Record("2", None, 1, transitions=4)), True)
        if isinstance(a, Send)
    ]
    assert (w.verb, w.holder, w.resource_version) == (Verb.UPDATE, "n1", "2")
    assert w.transitions == 5 and w.stamp_acquire


# -- 5. every update carries the resourceVersion it read ---------------------------------------


def test_an_update_without_a_resource_version_cannot_be_built() -> None:
    with pytest.raises(ValueError):
        Request(1, Verb.UPDATE, Purpose.RENEW, 1.0, resource_version=None, holder="n1")
    with pytest.raises(ValueError):
        Request(1, Verb.UPDATE, Purpose.RELEASE, 1.0, resource_version="")
    Request(1, Verb.CREATE, Purpose.CREATE, 1.0, holder="n1")  # a create has none


def test_no_update_in_a_busy_timeline_lacks_its_resource_version() -> None:
    sim = Sim(NAMES, timing(5, 3, 1), arp=True)
    sim.run_until(5.0)
    for name, fault in (("n1", "5xx"), ("n2", "429"), ("n3", "5xx-writes")):
        sim.nodes[name].fault = fault
        sim.run_until(sim.now + 7.0)
        sim.nodes[name].fault = ""
        sim.run_until(sim.now + 7.0)
    sim.store.nospace = True
    sim.run_until(sim.now + 9.0)
    sim.store.nospace = False
    sim.run_until(sim.now + 9.0)
    sim.stop(sim.leaders()[0])
    sim.run_until(sim.now + 9.0)
    assert sim.store.refused_updates_without_rv == 0
    assert len(sim.store.writes) > 20 and not sim.overlaps()


# -- the peers list never includes the node itself ---------------------------------------------


def test_the_core_ignores_itself_among_the_peers() -> None:
    e = Elector(
        Params(
            identity="n1",
            duration=5,
            renew_deadline=3,
            retry_period=1,
            self_addresses=frozenset({"10.0.0.1", "fd00::1"}),
        )
    )
    e.observe_peers(0.0, {"n1": PeerState.READY, "10.0.0.1": PeerState.READY,
                          "fd00:0::1": PeerState.READY})  # fmt: skip
    assert e.peers == {}  # only itself was listed: a lone node


def test_a_leader_never_gives_way_to_itself() -> None:
    """Its own address among health.peers looks like a healthy peer: without the guard the
    unhealthy leader releases the Lease to nobody, then waits a duration to take it back."""
    sim = Sim(["n1", "n2"], timing(5, 3, 1), view_self=True)
    sim.run_until(5.3)
    (old,) = sim.leaders()
    other = "n2" if old == "n1" else "n1"
    sim.kill(other)
    sim.nodes[other].health = False
    sim.nodes[other].fault = "blackhole"  # its node is gone: no /readyz answer either
    sim.run_until(6.3)
    sim.set_health(old, False)
    sim.run_until(30.0)
    assert sim.leaders() == [old]
    assert longest_gap(sim, 5.3) == 0.0
    assert sim.nodes[old].elector.stats_yields == 0


def test_a_follower_that_takes_over_after_refusals_waits_for_the_holders_next_read() -> None:
    """The alarm lasts long enough for the old leader to take the VIP back (holding); it is
    disarmed at every phase of the rounds. A follower whose take-over comes between the
    disarm and the holder's next round wins the Lease: it must not bind the VIP before the
    holder's next read has shown it the new holder."""
    won_by_follower = 0
    for k in range(120):
        end = 60.0 + k * 0.1
        sim = Sim(NAMES, timing(15, 10, 2), jitters={"n1": 0.9, "n2": 0.1, "n3": 0.5})
        old = leader_after(sim, 5.0)
        sim.store.nospace = True
        sim.run_until(end)
        assert sim.nodes[old].elector.role is Role.HOLDING
        sim.store.nospace = False
        sim.run_until(end + 40.0)
        assert not sim.overlaps(), end
        (new,) = sim.leaders()
        won_by_follower += new != old
    assert won_by_follower > 0  # the race this guards against did happen


@pytest.mark.parametrize("start", [5.0 + i * 0.13 for i in range(8)])
def test_whole_store_down_with_the_evidence_late_the_vip_comes_back_within_a_duration(
    start: float,
) -> None:
    """kube-apiserver's etcd check lags the store (its probe's timeout and rate limit): with
    5/3/1 the peers may answer not ready only after the leader's renew deadline. While no
    follower can have taken the Lease (its last renewal + one duration), the late evidence
    still carries a hold: the VIP comes back, never on two nodes."""
    sim = Sim(NAMES, timing(5, 3, 1), view_lag=3.0)
    old = leader_after(sim, start)
    for n in sim.nodes.values():
        n.fault = "5xx"
    sim.run_until(start + 20.0)
    assert sim.leaders() == [old], sim.nodes[old].log[-5:]
    assert sim.nodes[old].elector.role is Role.HOLDING
    assert not sim.overlaps()
    assert longest_gap(sim, start) <= 3.0 + 0.1  # from the deadline to the view, at most
    for n in sim.nodes.values():
        n.fault = ""
    sim.run_until(start + 40.0)
    assert sim.leaders() == [old] and not sim.overlaps()


def test_evidence_later_than_a_duration_after_the_last_renewal_brings_nothing_back() -> None:
    sim = Sim(NAMES, timing(5, 3, 1), view_lag=6.0)
    old = leader_after(sim, 5.0)
    for n in sim.nodes.values():
        n.fault = "5xx"
    sim.run_until(25.0)
    assert sim.leaders() == [] and sim.nodes[old].elector.role is Role.FOLLOWER
    assert not sim.overlaps()

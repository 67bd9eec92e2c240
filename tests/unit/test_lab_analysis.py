"""Unit tests for vipd.lab.analysis: outage, who answered, flaps, stability, percentiles.

Timelines are made up: one attempt every ``STEP`` seconds, answered by the named node or
failed, so each expected number can be worked out by hand.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vipd.lab.analysis import (
    Attempt,
    answered,
    format_line,
    measure,
    parse_line,
    percentile,
    percentiles,
    stable_on,
)

STEP = 0.01


def timeline(spec: str, t0: float = 100.0) -> list[Attempt]:
    """One attempt per character: a digit d is a success answered by n<d>; ``.`` a failure."""
    out = []
    for i, ch in enumerate(spec):
        t = t0 + i * STEP
        if ch == ".":
            out.append(Attempt(t, t + 0.5, False, None, "timeout"))
        else:
            out.append(Attempt(t, t + 0.001, True, f"n{ch}"))
    return out


def at(i: int, t0: float = 100.0) -> float:
    return t0 + i * STEP


def test_parse_and_format_round_trip() -> None:
    ok = parse_line("12.500000 12.500300 1 n2\n")
    assert ok == Attempt(12.5, 12.5003, True, "n2")
    bad = parse_line("12.5 13.0 0 - timeout")
    assert bad == Attempt(12.5, 13.0, False, None, "timeout")
    assert bad is not None and ok is not None
    assert parse_line(format_line(bad)) == bad
    assert parse_line(format_line(ok)) == ok
    assert parse_line("") is None
    assert parse_line("garbage line here now") is None
    assert parse_line("1.0 2.0 0 -") == Attempt(1.0, 2.0, False, None, "")


def test_clean_failover_outage_is_the_gap_between_successes() -> None:
    #           0123456789...
    attempts = timeline("1111111" + "." * 30 + "2222222222")
    o = measure(attempts, fault=at(7), end=at(50), pre=0.05, resolution=STEP)
    assert o.recovered
    # last success at index 6, first after at index 37
    assert o.outage == pytest.approx(31 * STEP)
    assert o.gap_start == pytest.approx(at(6)) and o.gap_end == pytest.approx(at(37))
    assert (o.before, o.after, o.final) == ("n1", "n2", "n2")
    assert o.switches == 1 and not o.flap and not o.interleaved
    assert o.failures == 30 and o.successes == 7 - 2 + 10  # window starts 0.05 s before
    assert o.resolution == STEP


def test_outage_ignores_gaps_that_end_before_the_fault() -> None:
    # A long gap well before the fault (noise) must not count as the fault's outage.
    attempts = timeline("11" + "." * 20 + "1111" + "...." + "222")
    o = measure(attempts, fault=at(26), end=at(40), pre=1.0)
    assert o.outage == pytest.approx(5 * STEP)  # index 25 → index 30
    assert (o.before, o.after) == ("n1", "n2")


def test_failures_do_not_matter_only_successes() -> None:
    # Failures interleaved with successes: no gap larger than the two-step spacing.
    attempts = timeline("1.1.1.1.1.1.1.1")
    o = measure(attempts, fault=at(3), end=at(15))
    assert o.outage == pytest.approx(2 * STEP)
    assert o.switches == 0 and o.before == o.after == o.final == "n1"


def test_no_recovery_is_reported_as_such_with_a_lower_bound() -> None:
    attempts = timeline("1111" + "." * 20)
    o = measure(attempts, fault=at(4), end=at(24))
    assert not o.recovered
    assert o.outage == pytest.approx(at(24) - at(3))
    assert o.after is None and o.before == "n1"


def test_no_data_at_all() -> None:
    o = measure([], fault=5.0, end=6.0)
    assert not o.recovered and o.outage is None


def test_no_success_before_the_fault_measures_from_the_window_start() -> None:
    attempts = timeline("....22222")
    o = measure(attempts, fault=at(0), end=at(9), pre=0.1)
    assert o.recovered and o.before is None and o.after == "n2"
    assert o.outage == pytest.approx(at(4) - (at(0) - 0.1))
    assert o.gap_start is None


def test_interleaved_answers_after_convergence_are_a_flap() -> None:
    attempts = timeline("111" + "....." + "2212122222")
    o = measure(attempts, fault=at(3), end=at(18))
    assert o.after == "n2" and o.final == "n2"
    assert o.switches == 5 and o.flap and o.interleaved  # 1→2→1→2→1→2


def test_three_node_hand_off_is_a_flap_but_not_interleaved() -> None:
    attempts = timeline("111" + "...." + "333" + ".." + "2222")
    o = measure(attempts, fault=at(3), end=at(16))
    assert o.switches == 2 and o.flap and not o.interleaved
    assert (o.before, o.final) == ("n1", "n2")


def test_move_gap_is_the_gap_where_the_answering_node_changes() -> None:
    # n1 stops answering for 5 attempts well before the move (a stall where nothing moved);
    # the move itself, n1 → n2, loses two connections.
    attempts = timeline("111" + "....." + "11111" + "..22222")
    o = measure(attempts, fault=at(1), end=at(20), pre=0.0)
    assert o.outage == pytest.approx(6 * STEP)  # index 2 → 8: the stall, not the move
    assert o.move_gap == pytest.approx(3 * STEP)  # index 12 (n1) → 15 (n2)
    assert o.move_failures == 2
    assert o.other_gap == pytest.approx(6 * STEP)
    assert o.to_dict()["move_gap"] == pytest.approx(3 * STEP)


def test_clean_failover_move_gap_equals_the_outage() -> None:
    attempts = timeline("1111111" + "." * 30 + "2222222222")
    o = measure(attempts, fault=at(7), end=at(50), pre=0.05)
    assert o.move_gap == pytest.approx(o.outage or 0.0)
    assert o.move_failures == 30 and o.other_gap == pytest.approx(STEP)


def test_no_move_no_move_gap() -> None:
    o = measure(timeline("111...111"), fault=at(3), end=at(9))
    assert o.move_gap is None and o.move_failures == 0
    assert o.other_gap == pytest.approx(4 * STEP)


def test_same_node_keeps_the_vip_no_switch() -> None:
    attempts = timeline("111...111")
    o = measure(attempts, fault=at(3), end=at(9))
    assert o.switches == 0 and not o.flap and o.before == o.after == "n1"


def test_attempts_outside_the_window_are_ignored() -> None:
    attempts = timeline("1111111111" + "......" + "2222" + "1111")  # n1 back after the window
    o = measure(attempts, fault=at(10), end=at(19), pre=0.02)
    assert o.final == "n2" and o.switches == 1


def test_unsorted_input_is_fine() -> None:
    attempts = timeline("111....222")
    o = measure(list(reversed(attempts)), fault=at(3), end=at(10))
    assert o.outage == pytest.approx(5 * STEP)


def test_stable_on_needs_an_unbroken_run_of_min_span() -> None:
    # 20 answers from n2, 10 ms apart: their starts span 0.19 s.
    assert stable_on(timeline("1111122222222222222222222"), "n2", 0.185)
    assert not stable_on(timeline("1111122222222222222222222"), "n2", 0.195)
    assert not stable_on(timeline("2222222222222222222.2"), "n2", 0.01)  # a failure breaks it
    assert not stable_on(timeline("222222222222222222221"), "n2", 0.01)  # so does another node
    assert not stable_on([], "n1", 0.0)
    # Only attempts since a given time count.
    assert not stable_on(timeline("2222222222222"), "n2", 0.05, since=at(10))
    assert stable_on(timeline("2222222222222"), "n2", 0.015, since=at(10))


def test_answered_counts_successes_per_node() -> None:
    attempts = timeline("11..22.2")
    assert answered(attempts, at(0), at(7)) == {"n1": 2, "n2": 3}
    assert answered(attempts, at(4), at(5)) == {"n2": 2}


def test_percentiles_match_linear_interpolation() -> None:
    xs = [float(x) for x in range(1, 101)]  # 1..100
    p = percentiles(xs)
    assert p is not None
    assert p.n == 100 and p.max == 100
    assert p.p50 == pytest.approx(50.5)
    assert p.p90 == pytest.approx(90.1)
    assert p.p99 == pytest.approx(99.01)
    assert percentiles([]) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0], 50) == 1.5
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


@given(
    st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=50),
    st.floats(min_value=0, max_value=100),
)
def test_percentile_lies_between_min_and_max_and_is_monotonic(xs: list[float], q: float) -> None:
    v = percentile(xs, q)
    assert min(xs) <= v <= max(xs)
    assert percentile(xs, 0) == min(xs) and percentile(xs, 100) == max(xs)
    assert percentile(xs, min(q + 10, 100)) >= v - 1e-9


@given(st.lists(st.sampled_from("12."), min_size=2, max_size=60), st.integers(0, 59))
def test_outage_is_bounded_by_the_window(spec: list[str], fault_i: int) -> None:
    attempts = timeline("".join(spec))
    fault, end = at(fault_i), at(len(spec))
    o = measure(attempts, fault=fault, end=end, pre=0.05)
    if o.outage is not None:
        assert 0 <= o.outage <= end - (fault - 0.05) + 1e-9
    if o.recovered:
        assert o.after is not None and o.gap_end is not None and o.gap_end > fault
        assert o.flap == (o.switches >= 2)


def test_kubeadm_flow_withdrawn_claims_are_not_moves_and_the_report_renders() -> None:
    from vipd.lab.addrwatch import AddrEvent
    from vipd.lab.kubeadm_flow import Step, render, withdrawn

    a = AddrEvent(10.0, "n2", True)
    b = AddrEvent(10.0, "n3", True)
    events = [a, b, AddrEvent(10.05, "n3", False)]
    assert not withdrawn(a, events) and withdrawn(b, events)
    assert not withdrawn(b, [a, b, AddrEvent(10.5, "n3", False)])  # too late: a move
    step = Step("adopt", "n1", 4.2, ["n1"], ["n2"], [("n2", 0.5)], 1, 0.06, 0, 14, 1)
    assert step.problems() == []
    follower = Step("adopt", "n3", 3.0, ["n1"], ["n2"], [("n2", 0.5)], 1, 0.06, 0, 10, 0)
    assert follower.problems() == ["adopt n3 (a follower): the VIP moved ['n1']→['n2']"]
    # One failed kubectl try where nothing moved: allowed while the prober's connects all
    # went through (the API server reset that one), not once a connect failed too or twice.
    reset = Step("roll", "n2", 3.0, ["n1"], ["n1"], [], 0, 0.01, 0, 10, 1)
    assert reset.problems() == []
    flaky = Step("roll", "n2", 3.0, ["n1"], ["n1"], [], 0, 0.01, 2, 10, 1)
    assert flaky.problems() == [
        "roll n2: kubectl through the VIP failed 1 times at 0 VIP move(s), 2 failed connects"
    ]
    twice = Step("roll", "n2", 3.0, ["n1"], ["n1"], [], 0, 0.01, 0, 10, 2)
    assert twice.kubectl_allowed() == 1 and len(twice.problems()) == 1
    text = render(
        {
            "lab": {"kubernetes": "v1.37.2"},
            "timeline": [{"t_s": 0.5, "what": "n1 +VIP"}],
            "init": {"kubeadm_init_s": 9.0, "vip_first_bound_on": "n1",
                     "vip_first_bound_after_s": 1.0},
            "adopt": [vars(step)],
            "power_loss": {"readyz_through_vip_after_s": 12.5},
            "summary": {"ok": True, "problems": []},
        }
    )  # fmt: skip
    assert "| adopt | n1 | 4.2 | n1 → n2 | 1 | 60 | 0 | 1/14 | None, None |" in text
    assert "n1 +VIP" in text and text.endswith("ok")


def test_kubeadm_flow_a_problem_steps_logs_are_its_window_of_every_node_in_time_order() -> None:
    from vipd.lab import kubeadm_flow
    from vipd.lab.kubeadm_flow import Step, render, step_logs
    from vipd.lab.kubelet_bed.podlogs import LogLine

    # Monotonic 100.0 is POSIX 5100.0: the step runs from 5100.0 to 5103.0.
    step = Step("adopt", "n2", 3.0, ["n1"], ["n3"], [("n3", 1.0)], 1, 0.2, 3, 10, 1, start=100.0)
    lines = [
        LogLine("n3", "kube-system_vipd-n3_u3", 5101.0, '{"msg": "became active"}'),
        LogLine("n1", "kube-system_vipd-n1_u1", 5099.9, "before the step"),
        LogLine("n1", "kube-system_vipd-n1_u1", 5100.5, '{"msg": "became backup"}'),
        LogLine("n2", "kube-system_vipd-n2_u2", 5103.1, "after the step"),
    ]
    got = step_logs(step, lines, offset=5000.0)
    assert got == [
        '+0.500 s n1: {"msg": "became backup"}',
        '+1.000 s n3: {"msg": "became active"}',
    ]
    many = [LogLine("n1", "p", 5100.0 + i / 1000, f"line {i}") for i in range(500)]
    kept = step_logs(step, many, offset=5000.0)
    assert len(kept) == kubeadm_flow.STEP_LOG_LINES and kept[-1].endswith("line 499")
    text = render(
        {
            "lab": {"kubernetes": "v1.37.2"},
            "adopt": [vars(step)],
            "logs": [{"step": "adopt n2", "lines": got}],
            "summary": {"ok": False, "problems": step.problems()},
        }
    )
    assert "vipd logs of adopt n2:\n+0.500 s n1:" in text


def test_kubeadm_flow_a_problem_steps_wire_names_who_advertised_and_the_longest_silence() -> None:
    import ipaddress

    from vipd.lab.kubeadm_flow import Step, render, step_wire
    from vipd.lab.wire import WireAdvert

    def advert(ts: float, sender: str, priority: int = 100) -> WireAdvert:
        src = ipaddress.ip_address({"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"}[sender])
        return WireAdvert(
            ts, sender, src, ipaddress.ip_address("224.0.0.18"), 255, True, 3, 1, 51,
            priority, 1, 0, 0.1, (ipaddress.ip_address("10.0.0.100"),), b"", 12, True,
        )  # fmt: skip

    # Monotonic 100.0 is POSIX 5100.0: the step runs from 5100.0 to 5103.0. n1 advertises
    # every 0.1 s, stalls 0.45 s from 5101.0, n2 takes over at 5101.40; n3 resigns once.
    adverts = [advert(5099.9, "n1")]
    adverts += [advert(5100.0 + i / 10, "n1") for i in range(11)]
    adverts += [advert(5101.3, "n3", 0), advert(5101.45, "n1")]
    adverts += [advert(5101.4 + i / 10, "n2") for i in range(1, 5)]
    adverts.append(advert(5103.2, "n2"))  # after the step
    adverts.sort(key=lambda a: a.ts)
    step = Step("adopt", "n3", 3.0, ["n1"], ["n2"], [("n2", 1.4)], 1, 0.2, 3, 10, 0, start=100.0)
    got = step_wire(step, adverts, offset=5000.0)
    assert got == [
        "+0.000 s n1 advertises, priority 100",
        "+1.300 s n3 advertises, priority 0",
        "+1.450 s n1 advertises, priority 100",
        "+1.500 s n2 advertises, priority 100",
        "n1: 12 adverts, longest silence 100 ms from +0.000 s",
        "n2: 4 adverts, longest silence 100 ms from +1.500 s",
        "n3: 1 adverts",
    ], got
    # n1's silence across n3's priority 0 (someone else in between) is not counted as its
    # own; alone, the 0.45 s stall is.
    alone = [a for a in adverts if a.sender == "n1"]
    assert "n1: 12 adverts, longest silence 450 ms from +1.000 s" in step_wire(
        step, alone, offset=5000.0
    )
    text = render(
        {
            "lab": {"kubernetes": "v1.37.2"},
            "logs": [{"step": "adopt n3", "lines": [], "wire": got}],
            "summary": {"ok": False, "problems": step.problems()},
        }
    )
    assert "VRRP adverts on the bridge in adopt n3:\n+0.000 s n1 advertises" in text


def test_kubeadm_flow_holders_replay_and_roll_windows() -> None:
    from vipd.lab.addrwatch import AddrEvent
    from vipd.lab.kubeadm_flow import holders_at, roll_windows
    from vipd.lab.kubelet_bed.clients import PodSeen, parse_pod_line

    events = [AddrEvent(5.0, "n2", True), AddrEvent(5.001, "n1", False)]
    assert holders_at(frozenset({"n1"}), events, 4.9) == ["n1"]
    assert holders_at(frozenset({"n1"}), events, 5.0005) == ["n1", "n2"]
    assert holders_at(frozenset({"n1"}), events, 6.0) == ["n2"]

    line = "n2   0b1c   2026-12-01T15:00:00Z   true,true   localhost/vipd:old\n"
    assert parse_pod_line(line, 3.0) == PodSeen(3.0, "n2", "0b1c", True, True, "localhost/vipd:old")
    assert parse_pod_line("n2 u2 <none> <none> img", 1.0) == PodSeen(
        1.0, "n2", "u2", False, False, "img"
    )
    assert parse_pod_line("garbage", 1.0) is None

    old = {"n1": "a", "n2": "b", "n3": "c"}
    seen = [
        PodSeen(1.0, "n2", "b", True, True, "old"),
        PodSeen(2.0, "n2", "b2", False, False, "new"),
        PodSeen(4.0, "n2", "b2", False, True, "new"),
        PodSeen(4.1, "n1", "a", True, True, "old"),
        PodSeen(6.0, "n1", "a2", False, True, "new"),
        PodSeen(6.2, "n3", "c", True, True, "old"),
        PodSeen(7.0, "n3", "c", False, True, "new"),  # the old UID: not the new pod
        PodSeen(9.0, "n3", "c2", False, True, "new"),
    ]
    assert roll_windows(seen, old, "new", 0.5, 10.0) == [
        ("n2", 0.5, 4.0),
        ("n1", 4.0, 6.0),
        ("n3", 6.0, 10.0),
    ]
    with pytest.raises(ValueError, match="n3"):
        roll_windows(seen[:-1], old, "new", 0.5, 10.0)


def test_kubelet_bed_reads_containerd_times_and_judges_the_static_exit() -> None:
    from vipd.lab.kubeadm_flow import Step
    from vipd.lab.kubelet_bed.bed import rfc3339

    assert rfc3339("1970-01-01T00:00:01.5Z") == 1.5
    assert rfc3339("1970-01-01T00:00:02.000000123Z") == pytest.approx(2.000000123)
    assert rfc3339("1970-01-01T00:00:03Z") == 3.0
    assert rfc3339("0001-01-01T00:00:00Z") == 0.0 and rfc3339("") == 0.0
    step = Step("adopt", "n2", 3.0, ["n1"], ["n1"], [], 0, 0.02, 0, 10, 0)
    step.static_exit, step.static_to_daemonset_s = 0, 0.8
    assert step.problems() == []
    step.static_exit, step.static_to_daemonset_s = 137, -0.2
    assert step.problems() == [
        "adopt n2: the static vipd exited 137",
        "adopt n2: the static and the DaemonSet vipd ran at once",
    ]


def test_vipd_lab_kubeadm_passes_the_election_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from vipd.lab import kubeadm_flow, replace_flow, runner

    seen: list[dict[str, object]] = []

    def fake_run(**kw: object) -> int:
        seen.append(kw)
        return 0

    monkeypatch.setattr(kubeadm_flow, "run", fake_run)
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    for mode in ("lease", "vrrp"):
        assert runner.run(parser.parse_args(["--kubeadm", "--election", mode, "--json"])) == 0
    kube_vip = ["--kubeadm", "--election", "lease", "--from", "kube-vip", "--at-once"]
    assert runner.run(parser.parse_args(kube_vip)) == 0
    replace = ["--kubeadm", "--replace", "--election", "vrrp", "--json"]
    assert runner.run(parser.parse_args(replace)) == 0
    assert runner.run(parser.parse_args([*replace, "--unicast"])) == 0
    plain = {"bootstrap": "vipd", "at_once": False, "replace": None, "unicast": False}
    assert seen == [
        {"as_json": True, "keep": False, "election": "lease", **plain},
        {"as_json": True, "keep": False, "election": "vrrp", **plain},
        {"as_json": False, "keep": False, "election": "lease", "bootstrap": "kube-vip",
         "at_once": True, "replace": None, "unicast": False},
        {"as_json": True, "keep": False, "election": "vrrp", **plain,
         "replace": replace_flow.run},
        {"as_json": True, "keep": False, "election": "vrrp", **plain,
         "replace": replace_flow.run, "unicast": True},
    ]  # fmt: skip
    # kube-vip's migration needs its Lease; keepalived's is not a kubelet lab; unicast is VRRP's
    for bad in (["--kubeadm", "--from", "kube-vip"], ["--kubeadm", "--from", "keepalived"],
                ["--from", "kube-vip"], ["--at-once"], ["--replace"],
                [*kube_vip, "--replace"],
                ["--kubeadm", "--election", "lease", "--unicast"]):  # fmt: skip
        assert runner.run(parser.parse_args(bad)) == 2, bad
    assert len(seen) == 5


CONTAINERD_LOG = (
    'time="2026-12-02T01:52:38.107Z" level=info msg="received container exit event '
    'container_id:\\"aaa1\\" id:\\"aaa1\\" pid:657 exit_status:3 '
    'exited_at:{seconds:1796176358 nanos:106623049}"\n'
    'time="2026-12-02T01:52:38.699Z" level=info msg="received sandbox exit event '
    'container_id:\\"bbb2\\" id:\\"bbb2\\" exit_status:137 '
    'exited_at:{seconds:1796176358 nanos:698189033}" monitor_name=podsandbox\n'
    'time="2026-12-02T01:53:01.000Z" level=info msg="received container exit event '
    'container_id:\\"ccc3\\" id:\\"ccc3\\" pid:912 exit_status:0 '
    'exited_at:{seconds:1796176381 nanos:500000000}"\n'
)


def test_a_containers_exit_is_read_from_the_containerd_log(tmp_path: Path) -> None:
    from vipd.lab.kubeadm_flow import exit_logged

    log = tmp_path / "containerd.log"
    log.write_text(CONTAINERD_LOG)
    assert exit_logged(log, "ccc3") == {
        "exit_code": 0, "finished": 1796176381.5, "state": "CONTAINER_EXITED",
    }  # fmt: skip
    first = exit_logged(log, "aaa1")
    assert first is not None and first["exit_code"] == 3
    assert exit_logged(log, "bbb2") is None  # a sandbox's exit, not a container's
    assert exit_logged(log, "ddd4") is None
    assert exit_logged(tmp_path / "absent.log", "ccc3") is None


def test_the_holder_watch_puts_each_event_on_the_monotonic_clock_with_its_own_offset() -> None:
    """The wall clock stepped 1 s forward between two events (NTP, a VM's clock set by its
    host): each event keeps its place against the marks, which are on time.monotonic()."""
    from vipd.lab.addrwatch import AddrEvent
    from vipd.lab.topology import Lab
    from vipd.lab.watch import HolderWatch

    watch = HolderWatch(cast(Lab, None), "10.77.0.100")
    watch._start, watch._offset = 0.0, 1000.0
    line = "[2026-12-04T18:12:30.893456]3: eth0    inet 10.77.0.100/32 scope global eth0"
    proc = SimpleNamespace(stdout=iter([line]))
    watch.watch._read(cast("subprocess.Popen[Any]", proc), "n2")
    (read,) = watch.watch.events
    assert read.clock_offset is not None
    assert abs(read.clock_offset - (time.time() - time.monotonic())) < 1.0
    watch.watch.events = [
        AddrEvent(1010.0, "n1", True, clock_offset=1000.0),
        AddrEvent(1011.5, "n1", False, clock_offset=1001.0),
        AddrEvent(1012.0, "n2", True),  # no offset of its own: the one taken at the start
    ]
    tl = watch.timeline()
    assert [(c.t, c.node, c.held) for c in tl.sorted_changes()] == [
        (10.0, "n1", True),
        (10.5, "n1", False),
        (12.0, "n2", True),
    ]


def test_replace_flow_judges_each_step_and_the_end() -> None:
    from vipd.lab.kubeadm_flow import Step
    from vipd.lab.replace_flow import membership_of, outcome_problems, step_problems

    join = Step("join", "n4", 40.0, ["n1"], ["n1"], [], 0, 0.01, 0, 50, 0)
    assert step_problems(join) == []
    moved = Step("join", "n4", 40.0, ["n1"], ["n4"], [("n4", 3.0)], 1, 0.2, 1, 50, 1)
    assert step_problems(moved) == ["join n4 (a follower): the VIP moved ['n1']→['n4']"]
    removal = Step("remove", "n1", 30.0, ["n1"], ["n2"], [("n2", 2.0)], 1, 0.06, 0, 40, 1)
    assert step_problems(removal) == []
    silent = Step("remove", "n2", 30.0, ["n3"], ["n3"], [], 0, 0.01, 0, 4, 4)
    assert step_problems(silent) == [
        "remove n2: kubectl through the VIP failed 4 times at 0 VIP move(s), 0 failed connects",
        "remove n2: /readyz through the VIP never answered (4/4 tries failed)",
    ]
    good = {
        "nodes": {"n4": True, "n5": True, "n6": True},
        "etcd_members": ["n4", "n5", "n6"],
        "holders": ["n5"],
    }
    assert outcome_problems(good) == []
    bad = {"nodes": {"n3": True, "n4": True, "n5": True, "n6": False},
           "etcd_members": ["n3", "n4", "n5", "n6"], "holders": ["n3"]}  # fmt: skip
    assert outcome_problems(bad) == [
        "after the replacement: Nodes {'n3': True, 'n4': True, 'n5': True, 'n6': False}, "
        "want ['n4', 'n5', 'n6'] Ready",
        "after the replacement: etcd members ['n3', 'n4', 'n5', 'n6'], want ['n4', 'n5', 'n6']",
        "after the replacement: VIP holders ['n3']",
    ]
    # VRRP unicast: each new vipd follows the static three and the two other new machines
    metrics = (
        "# HELP vipd_membership_peers x\n# TYPE vipd_membership_peers gauge\n"
        'vipd_membership_peers{list="election.vrrp.unicast_peers"} 5.0\n'
        "# HELP vipd_membership_held x\n# TYPE vipd_membership_held gauge\n"
        "vipd_membership_held 0.0\n"
    )
    assert membership_of(metrics) == {"peers": 5.0, "held": 0.0}
    assert membership_of("") == {"peers": None, "held": None}
    seen: dict[str, dict[str, float | None]] = {
        n: {"peers": 5.0, "held": 0.0} for n in ("n4", "n5", "n6")
    }
    followed = {**good, "membership": seen}
    assert outcome_problems(followed) == []
    seen["n5"] = {"peers": 3.0, "held": 1.0}
    seen["n6"] = {"peers": None, "held": None}
    assert outcome_problems(followed) == [
        "after the replacement: n5's vipd follows 3.0 unicast peers (want 5: the static three "
        "and the other new machines), held 1.0",
        "after the replacement: n6's vipd follows None unicast peers (want 5: the static three "
        "and the other new machines), held None",
    ]


def test_kubelet_bed_unicast_config_follows_the_cluster(tmp_path: Path) -> None:
    """``vipd lab --kubeadm --unicast``: n1..n3 the static start set (never held by the
    admission rule), the replacement's machines read from the cluster; a config vipd takes."""
    from vipd.config.source import parse
    from vipd.lab.kubelet_bed.bed import KubeletBed
    from vipd.lab.topology import Lab

    bed = KubeletBed.__new__(KubeletBed)  # the config alone: no binaries, no namespaces
    bed.election, bed.bootstrap, bed.unicast = "vrrp", "vipd", True
    bed.lab = Lab(nodes=6, workdir=tmp_path)
    bed.vip, bed.endpoint = "10.77.0.100", "10.77.0.100:6443"
    doc = bed.vipd_config()
    vrrp = doc["election"]["vrrp"]
    assert vrrp["unicast_peers"] == ["10.77.0.11", "10.77.0.12", "10.77.0.13"]
    assert vrrp["unicast_peers_from"] == ["endpointslices", "nodes"]
    assert doc["membership"]["api_servers"] == [
        "https://127.0.0.1:6443",
        "https://10.77.0.100:6443",
    ]
    parse(doc, hostname="n4")  # raises ConfigError naming the key if vipd refuses it
    bed.unicast = False
    multicast = bed.vipd_config()
    assert "unicast_peers" not in multicast["election"]["vrrp"] and "membership" not in multicast
    with pytest.raises(ValueError, match="unicast is a VRRP mode"):
        KubeletBed("lease", unicast=True)


def test_the_scale_down_must_leave_one_machine_holding_everything() -> None:
    from vipd.lab.replace_flow import SCALE_DOWN, alone_problems

    assert [old for old, _ in SCALE_DOWN] == ["n4", "n5"]  # the oldest first
    left = SCALE_DOWN[-1][1]
    assert {keep for _, keep in SCALE_DOWN} == {left} == {"n6"}
    good = {"nodes": {"n6": True}, "etcd_members": ["n6"], "holders": ["n6"]}
    assert alone_problems(good, left) == []
    bad = {"nodes": {"n5": True, "n6": True}, "etcd_members": ["n5", "n6"], "holders": []}
    assert alone_problems(bad, left) == [
        "after the scale-down: Nodes {'n5': True, 'n6': True}, want n6 alone and Ready",
        "after the scale-down: etcd members ['n5', 'n6'], want [n6]",
        "after the scale-down: VIP holders [], want [n6]",
    ]


def test_the_peers_each_vipd_believes_are_read_from_its_status() -> None:
    from vipd.lab.replace_flow import believed_peers

    followed = {
        "backend": "vrrp",
        "peers": [{"address": "10.0.0.9"}],
        "membership": {
            "lists": [
                {"list": "health.peers", "members": ["10.0.0.7"]},
                {"list": "election.vrrp.unicast_peers", "members": ["10.0.0.1", "10.0.0.5"]},
            ]
        },
    }
    assert believed_peers(followed) == ["10.0.0.1", "10.0.0.5"]  # the followed unicast list
    heard = {"backend": "vrrp", "peers": [{"address": "10.0.0.3"}, {"address": "10.0.0.2"}]}
    assert believed_peers(heard) == ["10.0.0.2", "10.0.0.3"]  # multicast: the peers heard
    lease = {
        "backend": "lease",
        "backends": [
            {"name": "local", "address": "10.0.0.1"},
            {"name": "peer", "address": "10.0.0.3"},
            {"name": "peer", "address": "10.0.0.2"},
        ],
    }
    assert believed_peers(lease) == ["10.0.0.2", "10.0.0.3"]  # its health peers

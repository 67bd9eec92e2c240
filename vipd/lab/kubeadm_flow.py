"""``vipd lab --kubeadm``: a cluster's endpoint from its first node to its DaemonSet, on real
kubelets, with what the clients saw at every step.

What it is: the flow a platform engineer runs first, on the kubelet bed
(``vipd.lab.kubelet_bed``: three kubeadm control-plane nodes with real kubelets and
containerd, each in its own network, mount and PID namespace, and a client namespace):

1. vipd's static pod on node 1, then ``kubeadm init`` with ``controlPlaneEndpoint: VIP:6443``
   (the VIP must come up before kubeadm waits on it);
2. nodes 2 and 3 joined as control-plane nodes, each with vipd's static pod;
3. the rendered DaemonSet applied, and ``vipd adopt`` on each node in turn (placed by a node
   label), the VIP's holder last;
4. all three nodes powered off at once and booted again, nothing done by hand.

Throughout, the VIP's holders are recorded from every node's address notifications
(``vipd.lab.addrwatch``) and, from the joins on, a 2 ms TCP prober in the client namespace
connects to the VIP. The report: the timeline, each adopt step's VIP moves and the longest
span between answered connects, how long after power came back ``/readyz`` answered through
the VIP, and whether the invariants held (the VIP bound before ``kubeadm init`` finished,
never on two nodes beyond a graceful handover's 0.1 s, at most one move per adopt step, none
at a follower's step, back within 60 s of a full power loss).

What it must not do: judge in any other way than the tests on the same bed do
(``tests/kubelet`` uses the helpers here), or leave the bed behind (``--keep`` keeps it
running until interrupted, then tears it down).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vipd.lab.addrwatch import AddressWatch, AddrEvent
from vipd.lab.kubelet_bed.bed import (
    ADOPT_LABEL,
    DAEMONSET_SELECTOR,
    VIPD_IMAGE,
    VIPD_IMAGE_MISSING,
    VIPD_IMAGE_NEXT,
    Bootstrap,
    Election,
    KubeletBed,
    pod_ready,
    usable,
)
from vipd.lab.kubelet_bed.clients import PodSeen
from vipd.lab.kubelet_bed.node import MachineError
from vipd.lab.kubelet_bed.podlogs import LogLine
from vipd.lab.prober import client_gap
from vipd.lab.timeline import OVERLAP_LIMIT, OVERLAP_NOISE
from vipd.lab.topology import LabError
from vipd.lab.wire import Capture, WireAdvert
from vipd.vrrp.state import master_down_interval

POWER_LOSS_LIMIT = 60.0
# A step with a problem carries every node's vipd log lines of its window in the report (the
# last this many): what each node decided is the post-mortem, and the bed is gone after it.
STEP_LOG_LINES = 200
# A step's end is 1 s after its last action (the prober's attempts finish, timeout 0.5 s):
# more than this since the client's last connect means the prober had stopped.
CLIENT_SILENCE = 2.0
# On top of a protocol bound: a shared, noisy 2-core machine (as tests/netns/test_chaos.py).
MARGIN = 0.5
# Lease mode: the same, with three API servers and etcd members in the loop (as tests/kube).
LEASE_MARGIN = 1.5


def withdrawn(claim: AddrEvent, events: Sequence[AddrEvent]) -> bool:
    """Was ``claim`` undone within the overlap limit? Two equal-priority backups both claim
    at Skew_Time after the leader's priority-0 advert, and the lower address yields at once:
    that is not a move."""
    return any(
        not e.added and e.node == claim.node and 0 <= e.at - claim.at <= OVERLAP_LIMIT
        for e in events
    )


def clients_seen(
    bed: KubeletBed, start: float, end: float
) -> tuple[float, int, int, list[str], list[str]]:
    """Between monotonic ``start`` and ``end``: the TCP prober's longest span between answers
    (s, rounded) and its failed connects, then kubectl's ``/readyz`` tries and what each
    failed one said (``+t s (took d s): why``, t from ``start``), and the try in flight when
    the step began (begun in the step before, where it is counted), as ``-t s (took d s):
    ok`` or its error."""
    assert bed.prober is not None and bed.kubectl_loop is not None
    gap, failed = client_gap(bed.prober, start, end)
    tries = bed.kubectl_loop.tries(start, end)
    errors = [f"+{t.start - start:.1f} s (took {t.end - t.start:.1f} s): {t.error}"
              for t in tries if not t.ok]  # fmt: skip
    in_flight = [f"-{start - t.start:.1f} s (took {t.end - t.start:.1f} s): {t.error or 'ok'}"
                 for t in bed.kubectl_loop.in_flight_at(start)]  # fmt: skip
    return round(gap, 4), failed, len(tries), errors, in_flight


def holders_at(initial: frozenset[str], events: Sequence[AddrEvent], at: float) -> list[str]:
    """Who held the VIP at POSIX time ``at``, replaying the address events from ``initial``
    (the holders when the watch started)."""
    holders = set(initial)
    for e in sorted(events, key=lambda e: e.at):
        if e.at > at:
            break
        if e.added:
            holders.add(e.node)
        else:
            holders.discard(e.node)
    return sorted(holders)


@dataclass
class Step:
    """One node's step of a handover (adopt) or of an image roll, as the clients saw it."""

    kind: str  # "adopt" or "roll"
    node: str
    took_s: float
    before: list[str]
    after: list[str]
    claims: list[tuple[str, float]]  # (node, s after the step began)
    moves: int
    gap_s: float  # longest span between answered 2 ms TCP connects
    failed: int  # failed TCP connects
    kubectl_tries: int
    kubectl_failed: int  # ``kubectl get --raw /readyz`` through the VIP that failed
    start: float = 0.0  # time.monotonic() when the step began (its window: took_s from it)
    # adopt only: the static vipd's exit code, and the DaemonSet vipd's start minus the
    # static one's finish (negative: both ran at once), from the node's containerd.
    static_exit: int | None = None
    static_to_daemonset_s: float | None = None
    # the static pod's program: vipd's exit code is judged, another's (kube-vip's) recorded
    static_program: str = "vipd"
    # the client's connects begun in the step, and the time from the last one to its end: a
    # prober that stopped would make the gap look small, so a silent client is a problem
    connects: int = 0
    client_silent_s: float = 0.0
    kubectl_errors: list[str] = field(default_factory=list)  # the failed tries, as said
    # A try begun before the step and still running when it began (counted in the step it
    # began in): what a short step had when one try hung across all of it.
    kubectl_in_flight: list[str] = field(default_factory=list)
    # the replacement: what each member's vipd believed its peers were after the step
    # (``replace_flow.peers_now``), or why it could not be read
    peers: dict[str, list[str] | str] = field(default_factory=dict)

    def kubectl_allowed(self) -> int:
        """Failed kubectl tries the step may have: one per VIP move (the connection the move
        breaks), and one more when the 2 ms prober through the VIP saw no failed connect in
        the step (the VIP's path was sound, so the API server itself refused that one: a reset
        seen at a follower's roll on the loaded 2-core machine)."""
        return self.moves + (1 if self.failed == 0 else 0)

    def problems(self) -> list[str]:
        out = []
        what = f"{self.kind} {self.node}"
        if len(self.after) != 1:
            out.append(f"{what}: holders {self.after} after it")
        if self.moves > 1:
            out.append(f"{what}: the VIP moved {self.moves} times")
        if self.node not in self.before and self.after != self.before:
            out.append(f"{what} (a follower): the VIP moved {self.before}→{self.after}")
        if self.client_silent_s > CLIENT_SILENCE:
            out.append(f"{what}: the client made no connect in the step's last "
                       f"{self.client_silent_s:.1f} s")  # fmt: skip
        if self.static_exit not in (0, None) and self.static_program == "vipd":
            out.append(f"{what}: the static vipd exited {self.static_exit}")
        if self.static_to_daemonset_s is not None and self.static_to_daemonset_s < 0:
            out.append(f"{what}: the static and the DaemonSet vipd ran at once")
        if self.kubectl_failed > self.kubectl_allowed():
            out.append(
                f"{what}: kubectl through the VIP failed {self.kubectl_failed} times "
                f"at {self.moves} VIP move(s), {self.failed} failed connects"
            )
        return out


def measure(
    bed: KubeletBed,
    watch: AddressWatch,
    *,
    kind: str,
    node: str,
    start: float,
    end: float,
) -> Step:
    """The step of ``node`` between monotonic ``start`` and ``end``: holders, moves, gaps."""
    offset = time.time() - time.monotonic()  # POSIX = monotonic + offset (to ~µs)
    w_start, w_end = start + offset, end + offset
    events = [e for e in watch.events if w_start <= e.at <= w_end]
    claims = [e for e in events if e.added]
    gap, failed, tries, errors, in_flight = clients_seen(bed, start, end)
    every = list(watch.events)
    assert bed.prober is not None
    begun = [a.start for a in bed.prober.attempts(start) if a.start <= end]
    return Step(
        kind=kind,
        node=node,
        took_s=round(end - start, 3),
        before=holders_at(watch.initial, every, w_start),
        after=holders_at(watch.initial, every, w_end),
        claims=[(e.node, round(e.at - w_start, 3)) for e in claims],
        moves=sum(1 for e in claims if not withdrawn(e, events)),
        gap_s=gap,
        failed=failed,
        kubectl_tries=tries,
        kubectl_failed=len(errors),
        start=start,
        kubectl_errors=errors,
        kubectl_in_flight=in_flight,
        connects=len(begun),
        client_silent_s=round(end - max(begun, default=start), 3),
    )


def step_logs(step: Step, lines: Sequence[LogLine], offset: float) -> list[str]:
    """The log lines in ``step``'s window (``offset``: POSIX time minus monotonic) as
    ``+seconds-into-the-step node: line``, oldest first, the last STEP_LOG_LINES of them."""
    start = step.start + offset
    end = start + step.took_s
    inside = sorted((ln for ln in lines if start <= ln.at <= end), key=lambda ln: ln.at)
    return [f"+{ln.at - start:.3f} s {ln.node}: {ln.text}" for ln in inside][-STEP_LOG_LINES:]


def step_wire(step: Step, adverts: Sequence[WireAdvert], offset: float) -> list[str]:
    """The VRRP adverts on the bridge in ``step``'s window (``offset``: POSIX time minus
    monotonic), as the post-mortem of a VIP that moved: every change of sender (who
    advertised, at which priority, ``+seconds-into-the-step``), then each sender's count and
    its longest silence between two of its own adverts with nobody else's in between (a
    Master that stalled, when that is near the backups' Master_Down_Interval)."""
    start = step.start + offset
    inside = [a for a in adverts if start <= a.ts <= start + step.took_s]
    out: list[str] = []
    last: WireAdvert | None = None
    for a in inside:
        if last is None or a.sender != last.sender or (a.priority == 0) != (last.priority == 0):
            out.append(f"+{a.ts - start:.3f} s {a.sender} advertises, priority {a.priority}")
        last = a
    for sender in sorted({a.sender for a in inside}):
        # In whole milliseconds, the first of equal ones.
        gaps = [
            (round((b.ts - a.ts) * 1000), -(a.ts - start))
            for a, b in itertools.pairwise(inside)
            if a.sender == b.sender == sender and a.priority and b.priority
        ]
        count = sum(a.sender == sender for a in inside)
        if gaps:
            gap_ms, at = max(gaps)
            out.append(f"{sender}: {count} adverts, longest silence {gap_ms} ms from +{-at:.3f} s")
        else:
            out.append(f"{sender}: {count} adverts")
    return out


def adopt_all(bed: KubeletBed, watch: AddressWatch) -> list[Step]:
    """Apply the DaemonSet and label the nodes one by one, the VIP's holder last."""
    bed.apply_daemonset()
    (leader,) = bed.holders()
    steps = []
    for name in [n for n in ("n1", "n2", "n3") if n != leader] + [leader]:
        static = StaticWatch(bed, name)
        static.start()
        t0 = time.monotonic()
        try:
            bed.adopt(name)
        finally:
            static.stop()
        time.sleep(1)  # the prober's last attempts finish (timeout 0.5 s)
        step = measure(bed, watch, kind="adopt", node=name, start=t0, end=time.monotonic())
        step.static_exit, step.static_to_daemonset_s = static.handover()
        step.static_program = bed.static_name
        steps.append(step)
    return steps


class StaticWatch:
    """Node ``name``'s static vipd container (pod ``vipd-<node>``), inspected every 0.1 s
    until it has exited: the kubelet's garbage collection may remove a deleted pod's
    containers at its next pass, so its exit code and finish are caught as they happen."""

    def __init__(self, bed: KubeletBed, name: str) -> None:
        self.bed = bed
        self.name = name
        self.pod = f"{bed.static_name}-{name}"  # a static pod's name: its file's + the node's
        running = [c for c in bed.vipd_containers(name, bed.static_name)
                   if c["pod"] == self.pod and c["state"] == "CONTAINER_RUNNING"]  # fmt: skip
        self.id: str | None = running[0]["id"] if running else None
        self.exited: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"static-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while self.id is not None and not self._stop.is_set():
            with contextlib.suppress(MachineError, subprocess.TimeoutExpired, ValueError):
                seen = self.bed.container(self.name, self.id)
                if seen is not None and seen["state"] == "CONTAINER_EXITED":
                    self.exited = seen
                    return
            self._stop.wait(0.1)

    def stop(self) -> None:
        # adopt returns once the static manifest is gone and the DaemonSet pod is ready, so
        # the static vipd has exited by then: one more look, then give up.
        self._thread.join(timeout=5)
        self._stop.set()
        self._thread.join(timeout=5)

    def handover(self) -> tuple[int | None, float | None]:
        """(the static vipd's exit code, the DaemonSet vipd's start minus the static one's
        finish); (None, None) if the static one was never seen exited. A container removed
        between two looks is found in the node's containerd log, which records every exit."""
        if self.exited is None and self.id is not None:
            self.exited = exit_logged(self.bed.machines[self.name].dir / "containerd.log", self.id)
        if self.exited is None:
            return None, None
        daemon = [c for c in self.bed.vipd_containers(self.name)
                  if c["pod"] != self.pod and c["started"]]  # fmt: skip
        if not daemon:
            return self.exited["exit_code"], None
        first = min(daemon, key=lambda c: c["started"])
        return self.exited["exit_code"], round(first["started"] - self.exited["finished"], 3)


def exit_logged(log: Path, container_id: str) -> dict[str, Any] | None:
    """Container ``container_id``'s exit as containerd logged it (``received container exit
    event ... exit_status:N exited_at:{seconds:S nanos:NS}``): its exit code and finish
    (POSIX seconds), as ``KubeletBed.container`` gives them; None if not there."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    pattern = (
        r'received container exit event container_id:\\"' + re.escape(container_id)
        + r'\\".*?exit_status:(\d+) exited_at:\{seconds:(\d+) nanos:(\d+)\}'
    )  # fmt: skip
    found = re.search(pattern, text)
    if found is None:
        return None
    status, seconds, nanos = (int(g) for g in found.groups())
    return {"exit_code": status, "finished": seconds + nanos / 1e9, "state": "CONTAINER_EXITED"}


def roll_windows(
    seen: Sequence[PodSeen], old: dict[str, str], image: str, start: float, end: float
) -> list[tuple[str, float, float]]:
    """An image roll cut into its node steps: ``(node, from, to)`` in roll order, from the
    pod watch. A node's step ends when the watch saw its new pod (``image``) ready; the next
    step begins there, because with ``maxUnavailable: 1`` the DaemonSet controller deletes
    the next old pod only once it has seen that same readiness. ``old``: the pods' UIDs by
    node before the roll. ValueError if a node's new pod was never seen ready."""
    ups = []
    for node, uid in old.items():
        ready = [s.at for s in seen if s.node == node and s.uid != uid and s.ready
                 and s.image == image]  # fmt: skip
        if not ready:
            raise ValueError(f"the roll: {node}'s new pod was never seen ready")
        ups.append((min(ready), node))
    ups.sort()
    out = []
    prev = start
    for i, (up, node) in enumerate(ups):
        to = end if i == len(ups) - 1 else up
        out.append((node, prev, to))
        prev = up
    return out


def roll(bed: KubeletBed, watch: AddressWatch, image: str = VIPD_IMAGE_NEXT) -> list[Step]:
    """A new DaemonSet image as docs/install.md says (render, apply, rollout status)."""
    assert bed.pod_watch is not None
    pods = bed.vipd_pods()
    old = {n: p["metadata"]["uid"] for n, p in pods.items()}
    for p in pods.values():
        bed.follow_logs(p["metadata"]["name"], bed.server("n3"))
    t0 = time.monotonic()
    bed.note(f"roll: DaemonSet image {image}")
    bed.apply_daemonset(image)
    bed.rollout_status()
    time.sleep(1)  # the prober's last attempts finish; the watch's last lines arrive
    end = time.monotonic()
    bed.note(f"roll: rollout status done in {end - t0:.1f} s")
    windows = roll_windows(bed.pod_watch.seen(t0), old, image, t0, end)
    return [measure(bed, watch, kind="roll", node=n, start=a, end=b) for n, a, b in windows]


@dataclass
class Reboot:
    node: str
    failover_bound_s: float  # VRRP: the successor's Master_Down_Interval + MARGIN
    vip_left_after_s: float | None  # from the kill to another node's claim
    new_holder: list[str]
    gap_s: float
    failed: int
    kubectl_tries: int
    kubectl_failed: int
    kubectl_errors: list[str]
    readyz_after_s: float | None  # /readyz through the VIP answering again, from the kill
    back_after_s: float | None  # the node Ready, its vipd pod running again, from the kill
    problems: list[str]


def handover_bound(bed: KubeletBed) -> float:
    """What a graceful handover's client gap must stay under: less than any takeover by
    timeout. VRRP: the successor's Master_Down_Interval (RFC 9568 section 6.1; the stopping
    leader's priority-0 advert lets it take over at Skew_Time). Lease: a released Lease is
    taken at a follower's next try, ``retry_period`` later at most, plus the lab's margin;
    one that was not released is taken only once ``duration`` has run out."""
    election = bed.vipd_config()["election"]
    if election["mode"] == "lease":
        return float(election["lease"]["retry_period"]) + LEASE_MARGIN
    return _master_down(election["vrrp"])


def _master_down(vrrp: dict[str, Any]) -> float:
    """Master_Down_Interval of a node with this ``election.vrrp`` config (VRRPv3)."""
    interval_cs = round(float(vrrp["advert_interval"]) * 100)
    return master_down_interval(3, int(vrrp.get("priority", 100)), interval_cs)


def failover_bound(bed: KubeletBed) -> float:
    """The failover bound the bed's config promises, plus the lab's margin for this machine.
    VRRP: Master_Down_Interval (RFC 9568 section 6.1) at the configured priority. Lease: a
    follower acquires once ``duration`` has passed without a renewal and tries every
    ``retry_period`` (client-go's leaderelection semantics, which vipd's Lease follows)."""
    election = bed.vipd_config()["election"]
    if election["mode"] == "lease":
        lease = election["lease"]
        return float(lease["duration"]) + float(lease["retry_period"]) + LEASE_MARGIN
    return _master_down(election["vrrp"]) + MARGIN


def reboot_leader(bed: KubeletBed, watch: AddressWatch, timeout: float = 180.0) -> Reboot:
    """Reboot the VIP's holder (every process killed, containerd and kubelet started again):
    the VIP leaves it within the failover bound, the cluster does not stall."""
    assert bed.prober is not None and bed.kubectl_loop is not None  # start_client() first
    (node,) = bed.holders()
    bound = failover_bound(bed)
    problems: list[str] = []
    bed.note(f"{node} (the holder): reboot")
    t_wall, t0 = time.time(), time.monotonic()
    bed.machines[node].reboot()
    bed.note(f"{node}: booted again (containerd up) in {time.monotonic() - t0:.1f} s")

    def claims() -> list[AddrEvent]:
        return [e for e in watch.events if e.added and e.at >= t_wall and e.node != node]

    # Lease mode: the successor takes over only once the Lease expired, after the boot.
    while not claims() and time.time() - t_wall <= bound + 1.0:
        time.sleep(0.1)
    first = min(claims(), key=lambda e: e.at, default=None)
    left = round(first.at - t_wall, 3) if first is not None else None
    if left is None or left > bound:
        problems.append(f"reboot {node}: the VIP left after {left} s, bound {bound:.3f} s")
    readyz: float | None = None
    back: float | None = None
    while time.monotonic() - t0 < timeout and (readyz is None or back is None):
        if readyz is None and bed.readyz():
            readyz = round(time.monotonic() - t0, 3)
        if back is None and _node_back(bed, node):
            back = round(time.monotonic() - t0, 3)
        time.sleep(0.5)
    if readyz is None:
        problems.append(f"reboot {node}: /readyz through the VIP not back in {timeout:.0f} s")
    if back is None:
        problems.append(f"reboot {node}: not Ready with its vipd pod in {timeout:.0f} s")
    time.sleep(1)
    gap, failed, tries, errors, _ = clients_seen(bed, t0, time.monotonic())
    holders = bed.holders()
    if len(holders) != 1:
        problems.append(f"reboot {node}: holders {holders} after it")
    bed.note(f"{node}: Ready and its vipd pod running {back} s after the reboot")
    return Reboot(
        node=node,
        failover_bound_s=round(bound, 3),
        vip_left_after_s=left,
        new_holder=holders,
        gap_s=gap,
        failed=failed,
        kubectl_tries=tries,
        kubectl_failed=len(errors),
        kubectl_errors=errors,
        readyz_after_s=readyz,
        back_after_s=back,
        problems=problems,
    )


def _node_back(bed: KubeletBed, node: str) -> bool:
    """Node ``node`` runs its vipd and its API server again after a reboot. From the node
    itself (its containerd, its own API server's /readyz) and then the API: right after the
    kill the API still says Ready (node-monitor-grace-period) and the pod ready."""
    try:
        if "vipd" not in bed.running_containers(node) or not bed.api_ready(node):
            return False
        return bed.nodes_ready().get(node, False) and pod_ready(bed.vipd_pods().get(node))
    except (LabError, MachineError, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError):
        return False


def _wait(what: str, cond: Callable[[], bool], timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return time.monotonic() - t0
        time.sleep(0.5)
    raise MachineError(f"{what}: not in {timeout:.0f} s")


@dataclass
class Recovery:
    static_on: str
    vip_gone_after_s: float  # from deleting the vipd pods
    waiting: list[str]  # why the new pods' containers wait (ErrImagePull, ...)
    readyz_failed_without_vip: bool
    vip_back_after_s: float  # from writing the static manifest back
    holder_on_static: list[str]
    adopted_after_s: float  # from fixing the image to the static manifest gone again
    holders_after: list[str]
    problems: list[str]


def _waiting_reasons(bed: KubeletBed, server: str, timeout: float = 60.0) -> list[str]:
    """Each DaemonSet pod's first waiting (init) container and its reason, once every pod
    has one: what ``kubectl get pods`` shows an operator of pods that cannot start."""
    t0 = time.monotonic()
    reasons: list[str] = []
    while time.monotonic() - t0 < timeout:
        reasons = []
        for node, pod in sorted(bed.vipd_pods(server=server).items()):
            status = pod.get("status", {})
            for c in [
                *status.get("initContainerStatuses", []),
                *status.get("containerStatuses", []),
            ]:
                reason = c.get("state", {}).get("waiting", {}).get("reason")
                if reason and reason != "PodInitializing":
                    reasons.append(f"{node}: {c['name']} {reason}")
                    break
        if len(reasons) == 3:
            break
        time.sleep(1)
    return reasons


def bad_image_recovery(bed: KubeletBed, static_on: str = "n1") -> Recovery:
    """docs/operations.md's "The DaemonSet pods do not come up after the handover": a
    nonexistent image and the vipd pods deleted (no VIP), the static manifest copied back
    on one node (the VIP answers again), then the image fixed (adopt removes that manifest
    when the DaemonSet pod starts there)."""
    # kubectl at a node's own API server, as the doc says: the VIP is about to go.
    server = bed.server(next(n for n in ("n1", "n2", "n3") if n != static_on))
    problems: list[str] = []
    bed.note(f"bad image: DaemonSet image {VIPD_IMAGE_MISSING}")
    bed.apply_daemonset(VIPD_IMAGE_MISSING, server=server)
    bed.kubectl("-n", "kube-system", "delete", "pods", "-l", DAEMONSET_SELECTOR,
                "--wait=true", server=server, timeout=120)  # fmt: skip
    bed.note("bad image: vipd pods deleted, their successors cannot start")
    gone = _wait("the VIP gone", lambda: bed.holders() == [], 120)
    bed.note(f"bad image: no node holds the VIP ({gone:.1f} s after the delete)")
    waiting = _waiting_reasons(bed, server)
    failed = not bed.readyz()
    if not failed:
        problems.append("bad image: /readyz through the VIP answered with no VIP")
    bed.write_static_pod(bed.machines[static_on])
    bed.note(f"bad image: vipd-pod.yaml copied back to {static_on}'s manifests")
    back = _wait("/readyz through the VIP after the static manifest", bed.readyz, 120)
    on_static = bed.holders()
    if on_static != [static_on]:
        problems.append(f"bad image: holders {on_static} on the static pod's return")
    bed.note(f"bad image: /readyz through the VIP answers {back:.1f} s after the copy")
    bed.apply_daemonset(VIPD_IMAGE, server=server)
    static = bed.static_manifest(static_on)
    adopted = _wait(
        f"adopt on {static_on}",
        lambda: not static.exists() and pod_ready(bed.vipd_pods(server=server).get(static_on)),
        180,
    )
    bed.rollout_status(server=server)
    time.sleep(1)
    after = bed.holders()
    if len(after) != 1:
        problems.append(f"bad image: holders {after} after the fix")
    bed.note(f"bad image: fixed; {static_on}'s static manifest removed by adopt in {adopted:.1f} s")
    return Recovery(
        static_on=static_on,
        vip_gone_after_s=round(gone, 3),
        waiting=waiting,
        readyz_failed_without_vip=failed,
        vip_back_after_s=round(back, 3),
        holder_on_static=on_static,
        adopted_after_s=round(adopted, 3),
        holders_after=after,
        problems=problems,
    )


def adopt_at_once(bed: KubeletBed, watch: AddressWatch) -> Step:
    """The DaemonSet applied and every node labelled in one command: each node's ``adopt``
    removes its static pod at the same time (the all-at-once path)."""
    bed.apply_daemonset()
    (leader,) = bed.holders()
    names = ["n1", "n2", "n3"]
    t0 = time.monotonic()
    bed.note(f"all nodes: label {ADOPT_LABEL} at once")
    bed.kubectl("label", "node", *names, f"{ADOPT_LABEL}=")
    end = t0 + 240
    while time.monotonic() < end:
        with contextlib.suppress(LabError, subprocess.TimeoutExpired, json.JSONDecodeError):
            pods = bed.vipd_pods()
            gone = not any(bed.static_manifest(n).exists() for n in names)
            if gone and all(pod_ready(pods.get(n)) for n in names) and len(bed.holders()) == 1:
                break
        time.sleep(0.5)
    else:
        raise MachineError(f"all at once: not every DaemonSet pod ready in {end - t0:.0f} s")
    bed.note(f"all nodes: DaemonSet pods ready, static pods gone, {time.monotonic() - t0:.1f} s")
    time.sleep(1)  # the prober's last attempts finish (timeout 0.5 s)
    # named after the holder it began with: the VIP may move once, to any node
    return measure(bed, watch, kind="adopt-all", node=leader, start=t0, end=time.monotonic())


def run(
    *,
    as_json: bool,
    keep: bool,
    election: Election = "vrrp",
    bootstrap: Bootstrap = "vipd",
    at_once: bool = False,
    replace: Callable[[KubeletBed, AddressWatch], tuple[dict[str, Any], list[str], list[Step]]]
    | None = None,
    unicast: bool = False,
) -> int:
    """The lab. ``bootstrap="kube-vip"``: the cluster bootstrapped by kube-vip's static pod
    and moved to vipd's DaemonSet on kube-vip's Lease, node by node (the holder last) or
    ``at_once``; the report ends after the move. ``replace``: run after the adopt on a bed
    with three spare machines (``vipd.lab.replace_flow.run``, which builds on this module:
    passed in, not imported), its report part and problems; the report ends there.
    ``unicast``: VRRP unicast, the peers following the cluster (``KubeletBed.vipd_config``)."""
    why = usable()
    if why is not None:
        print(f"vipd lab --kubeadm: cannot run here: {why}", file=sys.stderr)
        return 2
    report: dict[str, Any] = {
        "lab": {
            "mode": "kubeadm",
            "election": election,
            "from": bootstrap,
            "at_once": at_once,
            "replace": replace is not None,
            "unicast": unicast,
        }
    }
    problems: list[str] = []
    with KubeletBed(
        election, bootstrap=bootstrap, spare=3 if replace else 0, unicast=unicast
    ) as bed:
        report["lab"].update({"kubernetes": bed.version, "workdir": str(bed.lab.workdir)})
        watch = AddressWatch(bed.lab, bed.vip)
        watch.start()
        # VRRP: the adverts on the bridge, read back only for a step with a problem.
        wire = Capture(bed.lab, bed.lab.nodes) if election == "vrrp" else None
        if wire is not None:
            wire.start()
        wall0 = time.time()
        mono0 = time.monotonic()
        try:
            bed.init()
            init_done = time.time()
            bed.join("n2")
            bed.join("n3")
            bed.start_client()
            added = [e for e in watch.events if e.added]
            first = min(added, key=lambda e: e.at) if added else None
            report["init"] = {
                "kubeadm_init_s": round(init_done - wall0, 3),
                "vip_first_bound_on": first.node if first else None,
                "vip_first_bound_after_s": round(first.at - wall0, 3) if first else None,
            }
            if first is None or first.at >= init_done:
                problems.append("the VIP was not bound before kubeadm init finished")
            time.sleep(2)  # the prober's first answers
            steps = [adopt_at_once(bed, watch)] if at_once else adopt_all(bed, watch)
            report["adopt"] = [step_doc(s) for s in steps]
            problems += [p for s in steps for p in s.problems()]
            if bootstrap == "kube-vip":
                # the migration is the run: what follows is vipd's own life, tested without it
                raise _Done
            if replace is not None:
                report["replace"], replaced, done = replace(bed, watch)
                problems += replaced
                if bed.pod_logs is not None:
                    report["logs"] = post_mortem(bed, wire, [*steps, *done])
                raise _Done
            rolled = roll(bed, watch)
            report["roll"] = [step_doc(s) for s in rolled]
            problems += [p for s in rolled for p in s.problems()]
            if bed.pod_logs is not None:
                report["logs"] = post_mortem(bed, wire, [*steps, *rolled])
            if wire is not None:
                wire.stop()
                wire = None
            rebooted = reboot_leader(bed, watch)
            report["reboot"] = vars(rebooted)
            problems += rebooted.problems
            recovery = bad_image_recovery(bed)
            report["bad_image"] = vars(recovery)
            problems += recovery.problems
            bed.power_off_all()
            t0 = time.monotonic()
            bed.boot_all()
            try:
                bed.wait_readyz(POWER_LOSS_LIMIT - (time.monotonic() - t0))
                back: float | None = round(time.monotonic() - t0, 3)
            except Exception as exc:  # the bed's MachineError: reported, not raised
                back = None
                problems.append(f"after the power loss: {exc}")
            report["power_loss"] = {"readyz_through_vip_after_s": back}
            if keep:
                print(
                    f"vipd lab --kubeadm: the cluster runs on; kubectl --kubeconfig "
                    f"{bed.client_kubeconfig()} in namespace {bed.lab.client_ns}. "
                    "Ctrl-C tears it down.",
                    file=sys.stderr,
                )
                try:
                    while True:
                        time.sleep(3600)
                except KeyboardInterrupt:
                    pass
        except _Done:
            pass
        finally:
            watch.stop()
            if wire is not None:
                wire.stop()
        overlaps = [o for o in watch.overlaps() if o.duration > OVERLAP_LIMIT + OVERLAP_NOISE]
        problems += [f"two holders for {o.duration:.3f} s" for o in overlaps]
        notes = [(t - mono0, what) for t, what in bed.events]
        vip = [(e.at - wall0, f"{e.node} {'+' if e.added else '-'}VIP") for e in watch.events]
        report["timeline"] = [{"t_s": round(t, 3), "what": what} for t, what in sorted(notes + vip)]
    report["summary"] = {"ok": not problems, "problems": problems}
    print(json.dumps(report, indent=2) if as_json else render(report))
    return 0 if not problems else 1


def post_mortem(bed: KubeletBed, wire: Capture | None, steps: Sequence[Step]) -> list[Any]:
    """For each step with a problem: every node's vipd log lines of its window and, in VRRP
    mode, the adverts on the bridge (``step_logs``, ``step_wire``)."""
    assert bed.pod_logs is not None
    time.sleep(2 * bed.pod_logs.interval)  # its thread read the steps' last lines
    offset = time.time() - time.monotonic()
    kept = bed.pod_logs.around(bed.machines, 0.0, time.time())
    faulty = [s for s in steps if s.problems()]
    adverts = wire.adverts() if wire is not None and faulty else []
    return [
        {
            "step": f"{s.kind} {s.node}",
            "lines": step_logs(s, kept, offset),
            "wire": step_wire(s, adverts, offset),
        }
        for s in faulty
    ]


class _Done(Exception):
    """The run's steps are over (a kube-vip migration ends after its move)."""


def step_doc(step: Step) -> dict[str, Any]:
    return {**vars(step), "kubectl_allowed": step.kubectl_allowed()}


def _static(step: dict[str, Any]) -> str:
    if step.get("kind") not in ("adopt", "adopt-all"):
        return "-"
    return f"{step.get('static_exit')}, {step.get('static_to_daemonset_s')}"


def render(report: dict[str, Any]) -> str:
    lab = report["lab"]
    title = f"vipd lab --kubeadm on Kubernetes {lab.get('kubernetes', '?')}"
    if lab.get("from") == "kube-vip":
        how = "all nodes at once" if lab.get("at_once") else "node by node, the holder last"
        title += f", from kube-vip's static pod to vipd's DaemonSet on its Lease, {how}"
    lines = [title, ""]
    lines += [f"{row['t_s']:9.3f} s  {row['what']}" for row in report.get("timeline", [])]
    init = report.get("init", {})
    lines += [
        "",
        f"kubeadm init {init.get('kubeadm_init_s')} s; the VIP first bound on "
        f"{init.get('vip_first_bound_on')} {init.get('vip_first_bound_after_s')} s after it "
        "started",
        "",
        "| step | node | took s | holder before → after | VIP moves | client longest gap ms "
        "| failed connects | kubectl failed/tries | static pod's exit, DaemonSet vipd started s "
        "after it |",
        "|---|---|---:|---|---:|---:|---:|---:|---|",
    ]
    replaced = report.get("replace", {}).get("steps", [])
    replaced += report.get("replace", {}).get("scale_down", {}).get("steps", [])
    for s in [*report.get("adopt", []), *report.get("roll", []), *replaced]:
        lines.append(
            f"| {s['kind']} | {s['node']} | {s['took_s']:.1f} | {','.join(s['before'])} → "
            f"{','.join(s['after'])} | {s['moves']} | {s['gap_s'] * 1000:.0f} | {s['failed']} "
            f"| {s['kubectl_failed']}/{s['kubectl_tries']} | {_static(s)} |"
        )
    end = report.get("replace", {}).get("end")
    if end:
        lines += [
            "",
            f"after the replacement: Nodes {end['nodes']}, etcd members "
            f"{','.join(end['etcd_members'])}, VIP on {','.join(end['holders'])}",
        ]
    alone = report.get("replace", {}).get("scale_down", {}).get("end")
    if alone:
        lines.append(
            f"after the scale-down: Nodes {alone['nodes']}, etcd members "
            f"{','.join(alone['etcd_members'])}, VIP on {','.join(alone['holders'])}"
        )
    r = report.get("reboot")
    if r:
        lines += [
            "",
            f"reboot {r['node']} (the holder): the VIP left after {r['vip_left_after_s']} s "
            f"(bound {r['failover_bound_s']} s) for {','.join(r['new_holder'])}; client longest "
            f"gap {r['gap_s'] * 1000:.0f} ms, {r['failed']} failed connects, kubectl "
            f"{r['kubectl_failed']}/{r['kubectl_tries']} failed; /readyz through the VIP "
            f"{r['readyz_after_s']} s, node Ready with its vipd pod {r['back_after_s']} s after "
            "the reboot began",
        ]
    b_ = report.get("bad_image")
    if b_:
        lines += [
            "",
            f"bad image: no VIP {b_['vip_gone_after_s']} s after the vipd pods were deleted "
            f"(/readyz through the VIP failed: {b_['readyz_failed_without_vip']}); static "
            f"manifest back on {b_['static_on']}: the VIP answered {b_['vip_back_after_s']} s "
            f"later on {','.join(b_['holder_on_static'])}; image fixed: adopt removed the "
            f"manifest {b_['adopted_after_s']} s later, holder {','.join(b_['holders_after'])}",
        ]
    for logs in report.get("logs", []):
        lines += ["", f"vipd logs of {logs['step']}:", *logs["lines"]]
        if logs.get("wire"):
            lines += [f"VRRP adverts on the bridge in {logs['step']}:", *logs["wire"]]
    if "power_loss" in report:
        back = report["power_loss"].get("readyz_through_vip_after_s")
        lines += ["", f"full power loss: /readyz through the VIP {back} s after power came back"]
    summary = report["summary"]
    lines.append("ok" if summary["ok"] else "PROBLEMS: " + "; ".join(summary["problems"]))
    return "\n".join(lines)

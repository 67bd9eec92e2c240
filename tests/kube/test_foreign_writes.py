"""The Lease when someone else writes it, on the real bed, with the wire backstop out of play.

What it tests: ``kubectl patch`` naming a peer, ``kubectl delete``, and ``kubectl patch``
emptying the holder, each while the Lease is held, at several points of the holder's
renewal cycle (5/3/1), on the bed of ``vipd.lab.kubebed`` with its bridge dropping every
gratuitous ARP for the VIP (``vipd.lab.faults.drop_gratuitous_arp``: a LAN that drops them,
or an IPv6 VIP, which vipd does not watch on the wire), so that no node yields to another's
announcement: only the Lease rules can keep the holders apart. Judged on the ``ip monitor
address`` timeline: never two holders beyond 0.1 s, and a holder again within the takeover
bound (docs/design/lease.md, "When someone else writes the Lease").

Then a brownout of the leader's API server (SIGSTOP 2.5 s, SIGCONT 0.5 s, repeatedly): a
renewal it was sent while stopped is served after vipd gave up on it, and the no-holder span
is judged against the bound the design doc derives for it. Last, writes with the watch on
the Lease granted its RBAC (``list``, ``watch``): the displaced holder lets go on its event.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from tests.kube.conftest import MARGIN, TIMING, Window
from vipd.lab.faults import drop_gratuitous_arp, gratuitous_arp_dropped, pass_gratuitous_arp
from vipd.lab.kubebed.bed import API_PORT, LEASE, KubeBed
from vipd.lab.topology import VIP4

pytestmark = pytest.mark.kube

D, R, P = TIMING.duration, TIMING.renew_deadline, TIMING.retry_period
# How long after the holder's renewal is answered the write lands: early, middle and late
# in its renewal period (renewals every P).
PHASES = (0.05, 0.35, 0.65)

# The writer, run in the client namespace with the real client: it reads the Lease every
# 5 ms until the holder's next renewal shows, waits ``delay``, then writes (a ``kubectl
# patch`` or ``delete`` as one request), so the write's place in the renewal period is known
# to a few ms (kubectl itself starts in a few hundred ms on a loaded machine).
WRITER = r"""
import json, sys, time
from kubernetes import client, config
kubeconfig, server, ns, name, holder, delay, action = sys.argv[1:8]
cfg = client.Configuration()
config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
cfg.host = server
api = client.CoordinationV1Api(client.ApiClient(cfg))
first = api.read_namespaced_lease(name, ns).spec.renew_time
end = time.monotonic() + 10
while True:
    spec = api.read_namespaced_lease(name, ns).spec
    if spec.holder_identity == holder and spec.renew_time != first:
        break
    if time.monotonic() > end:
        sys.exit(f"no renewal by {holder} seen")
    time.sleep(0.005)
time.sleep(float(delay))
if action == "delete":
    api.delete_namespaced_lease(name, ns)
else:
    api.patch_namespaced_lease(name, ns, {"spec": {"holderIdentity": json.loads(action)}})
print(json.dumps({"renewal": spec.renew_time.isoformat(), "delay": float(delay)}))
"""


@pytest.fixture
def no_garp(bed: KubeBed) -> Iterator[None]:
    drop_gratuitous_arp(bed.lab, VIP4)
    try:
        yield
    finally:
        pass_gratuitous_arp(bed.lab)


def write_after_renewal(bed: KubeBed, holder: str, delay: float, action: str) -> str:
    """Run `WRITER` against a serving API server other than the holder's."""
    server = bed.serving(exclude=[holder])
    proc = bed.lab.exec(
        bed.lab.client_ns,
        [
            sys.executable, "-c", WRITER, str(bed.admin_kubeconfig),
            f"https://{server.ipv4}:{API_PORT}", LEASE[0], LEASE[1], holder, str(delay), action,
        ],
        timeout=30,
    )  # fmt: skip
    return proc.stdout.strip()


def rounds(bed: KubeBed, window: Window, what: str, action: Callable[[str, str], str]) -> None:
    for phase in PHASES:
        old = bed.wait_one_holder(D + P + 5)
        peer = next(n.name for n in bed.nodes if n.name != old)
        window.mark(f"{what}, {phase * P:.2f} s after a renewal by {old}")
        print(write_after_renewal(bed, old, phase * P, action(old, peer)))
        time.sleep(D + 2 * P)
    assert gratuitous_arp_dropped(bed.lab) > 0  # the wire was out of play for real


def test_lease_patched_to_name_a_peer_while_held(
    bed: KubeBed, window: Window, no_garp: None
) -> None:
    rounds(bed, window, "holderIdentity patched to a peer", lambda old, peer: json.dumps(peer))
    window.check()


def test_lease_deleted_while_held(bed: KubeBed, window: Window, no_garp: None) -> None:
    rounds(bed, window, "Lease deleted", lambda old, peer: "delete")
    window.check()


def test_lease_holder_emptied_by_hand_while_held(
    bed: KubeBed, window: Window, no_garp: None
) -> None:
    rounds(bed, window, "holderIdentity removed by a patch", lambda old, peer: "null")
    window.check()


# The brownout: the leader's API server stopped STOP s, running RUN s, for a while.
STOP, RUN, SPELL = 2.5, 0.5, 12.0


def test_leader_apiserver_brownout(bed: KubeBed, window: Window, no_garp: None) -> None:
    old = bed.wait_one_holder(10)
    api = bed.procs[old].apiserver
    window.mark(f"brownout of kube-apiserver on {old}: stopped {STOP} s, running {RUN} s")
    end = time.monotonic() + SPELL
    try:
        while time.monotonic() < end:
            api.signal(signal.SIGSTOP)
            time.sleep(STOP)
            api.signal(signal.SIGCONT)
            time.sleep(RUN)
    finally:
        api.signal(signal.SIGCONT)
    window.mark("brownout over")
    bed.settle()
    time.sleep(D + P)
    # docs/design/lease.md, "A write served late": a write the old leader sent before its
    # step-down may be served up to STOP later, and the others count D from seeing it:
    # no holder for at most STOP + RP + D + 2 round trips after the old leader let go.
    window.check(gap_limit=STOP + P + D + MARGIN)


# The RBAC the watch on the Lease needs (`vipd manifest rbac` renders get/update/create only).
WATCH_RBAC = f"""
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: vipd-lease-watch, namespace: {LEASE[0]}}}
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [{LEASE[1]}]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: vipd-lease-watch, namespace: {LEASE[0]}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: vipd-lease-watch}}
subjects: [{{kind: ServiceAccount, name: vipd, namespace: kube-system}}]
"""
LET_GO = "the Lease was written by someone else: letting go"


def test_with_the_watch_the_old_holder_lets_go_at_once(
    bed: KubeBed, window: Window, no_garp: None
) -> None:
    """With ``list``/``watch`` on the Lease granted, the watch runs against the real API
    server: the displaced holder says so in its log (no renewal's 409 needed), and a
    deleted Lease is re-created by its holder. Last in the module: the grant stays."""
    bed.kubectl("apply", "-f", "-", input_text=WATCH_RBAC)
    for n in bed.nodes:  # the watch starts with vipd (a refused one waits a minute)
        bed.restart_vipd(n.name)
    bed.settle()
    time.sleep(2)
    for what, action in (("Lease deleted", "delete"), ("holderIdentity patched", None)):
        old = bed.wait_one_holder(D + P + 5)
        peer = next(n.name for n in bed.nodes if n.name != old)
        since = len(bed.procs[old].vipd.log_text())
        window.mark(f"{what}, 0.35 s after a renewal by {old} (watch on)")
        print(write_after_renewal(bed, old, 0.35 * P, action or json.dumps(peer)))
        time.sleep(D + 2 * P)
        assert LET_GO in bed.procs[old].vipd.log_text()[since:], bed.vipd_report()
    text = "".join(p.vipd.log_text() for p in bed.procs.values())
    assert "lease watch refused" not in text, bed.vipd_report()
    window.check()

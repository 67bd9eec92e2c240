"""Address conflicts on real kernels: RFC 5227 probing before the claim, and foreign claims.

What it tests:

- a host on the segment (the lab's client) already has the VIP before vipd starts: `vipd
  check` exits 2 with one line that names that host's MAC and leaves the node untouched;
  `vipd run` stays out of the election, logs who has the VIP, probes again, and joins
  once the address is gone; IPv4 (ARP probe from 0.0.0.0) and IPv6 (DAD solicitation
  from ::);
- a VIP held by a VRRP master of our VRID is not a conflict: `vipd check` on a backup node
  says who holds it and exits 0, and a backup started meanwhile joins as usual;
- a foreign host announcing the VIP (gratuitous ARP from its MAC) while vipd leads is
  detected, counted in ``vipd_vip_duplicate_claims_total``, logged with the MAC, and
  defended with an announcement; the leader keeps the VIP. A claimant it did not answer (the
  RFC 5227 budget spent) is asked by unicast ARP probes whether it still has the VIP: a host
  that has it answers (its kernel), and the leader announces only once it no longer does.

Needs root (network namespaces).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import yaml

from vipd.lab import faults
from vipd.lab.daemons import VipdDaemon, VrrpSpec, make_daemon
from vipd.lab.topology import VIP4, VIP6, Lab, python_argv


def mac_of(lab: Lab, ns: str) -> str:
    return lab.exec(ns, ["cat", "/sys/class/net/eth0/address"]).stdout.strip()


def config_for(lab: Lab, name: str, vip: str) -> str:
    d = make_daemon("vipd", lab, lab.node(name), VrrpSpec(vip=vip))
    assert isinstance(d, VipdDaemon)
    path = lab.workdir / f"{name}-check.yaml"
    path.write_text(yaml.safe_dump(d.config(), sort_keys=False))
    return str(path)


def vipd(lab: Lab, name: str, *args: str) -> tuple[int, str, str]:
    out = lab.exec(lab.node(name).ns, python_argv("vipd", *args), check=False, timeout=30)
    return out.returncode, out.stdout, out.stderr


def test_a_vip_already_answered_by_another_host_is_refused(
    make_lab: Callable[..., Lab],
) -> None:
    lab = make_lab(1)
    client_mac = mac_of(lab, lab.client_ns)
    for vip, plen, extra in ((VIP4, 32, []), (VIP6, 128, ["nodad"])):
        lab.ip(lab.client_ns, "addr", "add", f"{vip}/{plen}", "dev", "eth0", *extra)
        path = config_for(lab, "n1", vip)
        before = lab.ip(lab.node("n1").ns, "addr", "show")
        code, out, err = vipd(lab, "n1", "check", "--config", path)
        assert code == 2, (vip, code, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, (vip, err)
        assert f"{vip} is already in use on eth0 by {client_mac}" in lines[0], lines[0]
        assert "refusing to claim it" in lines[0]
        assert lab.ip(lab.node("n1").ns, "addr", "show") == before
        # `vipd run` stays out of the election, says who has the VIP, and probes again.
        d = make_daemon("vipd", lab, lab.node("n1"), VrrpSpec(vip=vip))
        d.start()
        try:
            deadline = time.monotonic() + 10
            while "VIP held by another host" not in d.log_text():
                assert d.running() and time.monotonic() < deadline, d.log_text()
                time.sleep(0.05)
            time.sleep(2.5)  # several probes and far more than a Master_Down_Interval
            assert d.running(), d.log_text()
            assert client_mac in d.log_text() and "refusing to claim it" in d.log_text()
            assert d.state() is None, d.log_text()
            assert "n1" not in lab.holders(vip)
            lab.ip(lab.client_ns, "addr", "del", f"{vip}/{plen}", "dev", "eth0")
            # Gone from the other host: the waiting vipd joins and, alone, takes the VIP.
            while lab.holders(vip) != ["n1"]:
                assert d.running() and time.monotonic() < deadline + 10, d.log_text()
                time.sleep(0.05)
            assert "no longer held by another host" in d.log_text()
        finally:
            d.stop()
        # And the same config now checks clean.
        code, out, err = vipd(lab, "n1", "check", "--config", path)
        assert code == 0, err
        assert f"no other host answered a probe for VIP {vip}" in out, out


def test_a_vip_held_by_our_vrrp_master_is_not_a_conflict(make_lab: Callable[..., Lab]) -> None:
    lab = make_lab(2)
    spec = VrrpSpec(vip=VIP4, advert_interval=0.1)
    n1 = make_daemon("vipd", lab, lab.node("n1"), spec)
    n1.start()
    deadline = time.monotonic() + 10
    while lab.holders(VIP4) != ["n1"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lab.holders(VIP4) == ["n1"], n1.log_tail()
    code, out, err = vipd(lab, "n2", "check", "--config", config_for(lab, "n2", VIP4))
    assert code == 0, err
    n1_mac = mac_of(lab, lab.node("n1").ns)
    assert f"answered by {n1_mac}: held by the VRRP router 10.77.0.11" in out, out
    n2 = make_daemon("vipd", lab, lab.node("n2"), spec)
    n2.start()
    time.sleep(2.0)
    assert n2.running() and n2.state() == "BACKUP", n2.log_tail()
    assert "held by the VRRP router" in n2.log_text()
    assert lab.holders(VIP4) == ["n1"]


def test_a_foreign_claim_while_leading_is_counted_logged_and_defended(
    make_lab: Callable[..., Lab],
) -> None:
    lab = make_lab(2)
    spec = VrrpSpec(vip=VIP4, advert_interval=0.1)
    daemons = [make_daemon("vipd", lab, n, spec) for n in lab.nodes]
    # n1 leads before n2 starts, so n2 never leads: a claim that lands within a few intervals
    # of a lower-priority advert (n2 winning the start race and n1 preempting it) is that
    # peer's split brain by design, answered at once and not logged as a foreign host.
    daemons[0].start()
    deadline = time.monotonic() + 10
    while lab.holders(VIP4) != ["n1"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lab.holders(VIP4) == ["n1"], daemons[0].log_tail()
    daemons[1].start()
    while daemons[1].state() != "BACKUP" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert daemons[1].state() == "BACKUP", daemons[1].log_tail()
    client_mac = mac_of(lab, lab.client_ns)

    def claims() -> float:
        code = (
            "import urllib.request;"
            "print(urllib.request.urlopen('http://127.0.0.1:2112/metrics', timeout=5)"
            ".read().decode())"
        )
        text = lab.exec(lab.node("n1").ns, [sys.executable, "-c", code]).stdout
        line = next(
            ln
            for ln in text.splitlines()
            if ln.startswith('vipd_vip_duplicate_claims_total{source="arp"}')
        )
        return float(line.split()[-1])

    before = claims()
    # The client announces the VIP as its own, three times (a gratuitous ARP each).
    for _ in range(3):
        lab.exec(lab.client_ns, [sys.executable, "-c", faults._ANNOUNCE, "eth0", VIP4])
    time.sleep(0.3)
    assert claims() - before == 3
    log = daemons[0].log_text()
    assert "another node claims the VIP" not in log, log  # no peer advert: the premise
    foreign = f'msg="a foreign host claims the VIP while we hold it" claimant_mac={client_mac}'
    assert foreign in log, log
    # Defended once (RFC 5227: at most one defence per 10 s), then only counted.
    assert log.count("defending=true") == 1, log
    assert lab.holders(VIP4) == ["n1"]
    assert daemons[1].state() == "BACKUP"
    # The backup saw the claims too but does not hold the VIP: nothing to count there.
    assert "a foreign host claims the VIP" not in daemons[1].log_text()
    # The client never had the VIP: the undefended claims' claimant, asked by a unicast probe,
    # does not answer, and the leader announces (clients there would be stranded).
    gone = 'reason="a claimant of the VIP no longer answers for it: clients it moved would '
    assert log.count(gone) == 1 and f"claimant_mac={client_mac}" in log, log

    # Now the client really has the VIP (a foreign host; the budget is still spent): its
    # kernel answers the leader's unicast probes, so the leader does not announce while it
    # keeps the address, and does once it lets it go.
    lab.ip(lab.client_ns, "addr", "add", f"{VIP4}/32", "dev", "eth0")
    lab.exec(lab.client_ns, [sys.executable, "-c", faults._ANNOUNCE, "eth0", VIP4])
    time.sleep(1.6)  # asked 0.12 s after the claim, twice more 0.1 s on, then 0.2, 0.4, 0.8 s
    log = daemons[0].log_text()
    assert log.count(gone) == 1, log
    assert log.count("defending=true") == 1, log
    lab.ip(lab.client_ns, "addr", "del", f"{VIP4}/32", "dev", "eth0")
    deadline = time.monotonic() + 2.0
    while daemons[0].log_text().count(gone) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert daemons[0].log_text().count(gone) == 2, daemons[0].log_tail()
    assert lab.holders(VIP4) == ["n1"]

"""The node-by-node move from kube-vip to vipd on kube-vip's own Lease, with the config
``vipd import kube-vip`` made of the manifest the real kube-vip generates: docs/operations.md,
"Replacing kube-vip", on the real control plane (``vipd.lab.kubebed``: three etcd members,
three kube-apiservers).

What it tests: kube-vip (v1.0.0, ARP, leader election on ``plndr-cp-lock``) runs on all three
nodes; ``kube-vip manifest pod`` for the bed's VIP and timings is imported; then node by
node, the kube-vip leader last, kube-vip is stopped (SIGTERM) and vipd started with the
imported config. Throughout, no two nodes hold the VIP (polled every 50 ms), and after each
swap exactly one node holds it and it is the Lease's holder; at the end a vipd holds both.
The imported config is used as printed; only what the bed decides is added: the node's name,
its own API server's credentials (the bed's admin kubeconfig, as kube-vip has them) and the
metrics port (kube-vip's :2112 is taken by the bed's observers).
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.prereq import missing
from vipd.importers import kubevip
from vipd.lab.daemons import VipdDaemon, VrrpSpec
from vipd.lab.kubebed import binaries
from vipd.lab.kubebed.bed import STATUS_PORT, BedKubeVip, KubeBed, Timing, usable
from vipd.lab.topology import VIP4, Node, python_env

pytestmark = pytest.mark.kube

TIMING = Timing(duration=5, renew_deadline=3.0, retry_period=1.0)
SETTLE = 2 * (TIMING.duration + TIMING.retry_period) + 3.0  # s a swap may take to settle


class ImportedVipd(VipdDaemon):
    def __init__(self, bed: KubeBed, node: Node, config: dict[str, Any]) -> None:
        super().__init__(bed.lab, node, VrrpSpec(vip=VIP4), bed.lab.nodes)
        self.imported = config

    def config(self) -> dict[str, Any]:
        return self.imported

    def _env(self) -> dict[str, str]:
        return python_env({"NODE_NAME": self.node.name})


def lease_holder(bed: KubeBed) -> str:
    out = bed.kubectl("get", "lease", "-n", "kube-system", "plndr-cp-lock", "-o", "yaml").stdout
    return str(yaml.safe_load(out)["spec"].get("holderIdentity") or "")


def watch_for(bed: KubeBed, seconds: float) -> list[str]:
    """Poll the VIP's holders for ``seconds``; fail at once on two. The last holders."""
    end = time.monotonic() + seconds
    holders = bed.holders()
    while time.monotonic() < end:
        holders = bed.holders()
        assert len(holders) <= 1, f"two VIP holders: {holders}"
        time.sleep(0.05)
    return holders


def test_node_by_node_from_kube_vip_on_its_lease(tmp_path: Path) -> None:
    why = usable()
    if why is not None:
        missing(why)
    bins = binaries.find()
    if binaries.kube_vip(bins) is None:
        missing(f"kube-vip is not built in {bins} (scripts/setup-kube says why)")
    manifest = subprocess.run(
        [str(bins / binaries.KUBE_VIP), "manifest", "pod", "--interface", "eth0",
         "--address", VIP4, "--controlplane", "--arp", "--leaderElection",
         "--leaseDuration", str(TIMING.duration),
         "--leaseRenewDuration", str(int(TIMING.renew_deadline)),
         "--leaseRetry", str(int(TIMING.retry_period))],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    result = kubevip.convert(manifest, "kube-vip.yaml")
    assert result.exit_code == 0, (result.errors, result.dropped)
    imported = yaml.safe_load(result.yaml)
    assert imported["election"]["lease"]["name"] == "plndr-cp-lock"

    with KubeBed(timing=TIMING, start_vipd=False, start_prober=False) as bed:
        kv = {n.name: BedKubeVip(bed, n) for n in bed.nodes}
        vipds: dict[str, ImportedVipd] = {}
        try:
            for d in kv.values():
                d.start()
            leader = bed.wait_one_holder(60)
            holders = watch_for(bed, SETTLE / 2)
            assert holders == [leader] and lease_holder(bed) == leader
            order = [n for n in kv if n != leader] + [leader]
            for name in order:
                node = bed.node(name)
                kv[name].stop(signal.SIGTERM, timeout=15)
                cfg = dict(imported, node=name, metrics={"listen": f"0.0.0.0:{STATUS_PORT}"})
                kubeconfig = bed.lab.workdir / f"{name}-admin.kubeconfig"
                bed.local_admin_kubeconfig(kubeconfig)
                cfg["election"] = {
                    "mode": "lease",
                    "lease": {**imported["election"]["lease"], "kubeconfig": str(kubeconfig)},
                }
                vipds[name] = ImportedVipd(bed, node, cfg)
                vipds[name].start()
                holders = watch_for(bed, SETTLE)
                assert len(holders) == 1, (name, holders, vipds[name].log_tail())
                assert lease_holder(bed) == holders[0], (name, holders)
                print(f"\nswapped {name}: VIP and Lease on {holders[0]}")
            assert all(v.running() for v in vipds.values())
            assert bed.holders()[0] in vipds
        finally:
            for v in vipds.values():
                v.stop(signal.SIGTERM, timeout=15)
            for d in kv.values():
                d.stop(signal.SIGTERM, timeout=15)

"""``vipd import kube-vip`` (vipd/importers/kubevip.py) on manifests the real kube-vip
generated (``kube-vip manifest pod|daemonset``, v1.0.0, the commands in each fixture's first
lines), on the example of kubeadm's HA guide, and on small edits of them for each refusal.
A fixture is regenerated with the real binary when it is there, so a kube-vip whose
output changed shows up here."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests import prereq
from vipd import config
from vipd.importers import EXIT_IMPORT_DROPPED, EXIT_IMPORT_ERROR, Imported, kubevip

DATA = Path(__file__).parent / "data" / "import"
FIXTURES = sorted(DATA.glob("kube-vip-*.yaml"))
KUBEVIP_VERSION = "v1.0.0"


def convert(name: str) -> Imported:
    return kubevip.convert((DATA / name).read_text(), name)


def load(result: Imported) -> config.Config:
    assert not result.errors, result.errors
    return config.parse(yaml.safe_load(result.yaml), env={}, hostname="test")


def lease_of(cfg: config.Config) -> config.Lease:
    assert cfg.election.lease is not None
    return cfg.election.lease


def command_of(path: Path) -> list[str]:
    """The kube-vip arguments a fixture records on its second line."""
    line = path.read_text().splitlines()[1]
    assert line.startswith("#   kube-vip "), line
    return shlex.split(line.removeprefix("#   kube-vip "))


def body(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("#"))


def test_there_are_the_fixtures() -> None:
    assert len(FIXTURES) == 7
    for path in FIXTURES:
        assert f"kube-vip {KUBEVIP_VERSION}" in path.read_text().splitlines()[0]


@pytest.mark.parametrize("name", ["kube-vip-pod-arp-le.yaml", "kube-vip-pod-arp-services.yaml"])
def test_arp_with_leader_election_is_a_lease_on_kube_vips_lease(name: str) -> None:
    result = convert(name)
    cfg = load(result)
    assert [str(v) for v in cfg.vips] == ["192.168.0.40"]
    assert cfg.interface == "eth0"
    assert cfg.election.mode == "lease"
    lease = lease_of(cfg)
    assert (lease.name, lease.namespace) == ("plndr-cp-lock", "kube-system")
    # kube-vip v1.0.0's manifest writes its 5/3/1 timers: vipd takes them over
    assert (lease.duration, lease.renew_deadline, lease.retry_period) == (5, 3.0, 1.0)
    assert cfg.metrics.listen == "0.0.0.0:2112"
    assert f"# env address ({name}:" in result.yaml


def test_nothing_is_dropped_from_the_plain_control_plane_manifest() -> None:
    result = convert("kube-vip-pod-arp-le.yaml")
    assert (result.dropped, result.exit_code) == ((), 0)


def test_services_are_dropped_with_their_reason() -> None:
    result = convert("kube-vip-pod-arp-services.yaml")
    assert result.exit_code == EXIT_IMPORT_DROPPED
    assert {d.what for d in result.dropped} == {
        "env svc_enable=true",
        "env svc_leasename=plndr-svcs-lock",
    }
    assert all("LoadBalancer" in d.why for d in result.dropped)
    assert result.dropped[0].where.startswith("kube-vip-pod-arp-services.yaml:")


def test_the_daemonset() -> None:
    result = convert("kube-vip-ds-arp-le.yaml")
    cfg = load(result)
    assert lease_of(cfg).name == "plndr-cp-lock"
    assert "(DaemonSet/kube-vip-ds container kube-vip)" in result.yaml
    assert result.exit_code == EXIT_IMPORT_DROPPED  # --services is in kube-vip's example


def test_without_leader_election_there_is_nothing_to_carry_over() -> None:
    result = convert("kube-vip-pod-arp-nole.yaml")
    assert result.exit_code == EXIT_IMPORT_ERROR
    (error,) = result.errors
    assert "vip_leaderelection is not true" in error


def test_bgp_mode_is_vipds_bgp_mode() -> None:
    result = convert("kube-vip-pod-bgp.yaml")
    cfg = load(result)
    assert cfg.announce.mode == "bgp" and cfg.election.mode != "lease"
    bgp = cfg.announce.bgp
    assert bgp.local_asn == 65000 and str(bgp.router_id) == "192.168.0.2"
    assert [(str(p.address), p.asn, p.password_file) for p in bgp.peers] == [
        ("192.168.0.10", 65000, None),
        ("192.168.0.11", 65000, None),
    ]
    assert cfg.interface is None  # kube-vip's lo: vipd binds the VIP itself
    assert cfg.health is not None and cfg.health.peers_from == ("endpointslices",)
    assert {d.what.split("=")[0] for d in result.dropped} == {
        "env vip_interface",
        "env svc_enable",
        "env svc_leasename",
    }


def test_a_bgp_peer_with_a_password_names_the_file_and_never_the_password() -> None:
    result = convert("kube-vip-pod-bgp-peer.yaml")
    cfg = load(result)
    (peer,) = cfg.announce.bgp.peers
    assert (str(peer.address), peer.asn) == ("192.168.0.1", 65001)
    assert peer.password_file == "/etc/vipd/bgp-password-192.168.0.1"
    (d,) = result.dropped
    assert d.what == "BGP password of peer 192.168.0.1 (its value)"
    assert "secret" not in result.yaml + d.line()
    assert cfg.interface == "eth0"


def test_routing_table_mode_is_vipds() -> None:
    result = convert("kube-vip-pod-table.yaml")
    cfg = load(result)
    assert cfg.announce.mode == "routing-table" and not result.dropped
    assert (cfg.announce.table, cfg.announce.protocol) == (198, 248)  # kube-vip's, vipd's too
    text = edited("kube-vip-pod-table.yaml", vip_routingtableid="200", vip_routingprotocol="99")
    cfg = load(kubevip.convert(text, "m.yaml"))
    assert (cfg.announce.table, cfg.announce.protocol) == (200, 99)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"bgp_peers": "[fd00::1]:65001::true"}, "fd00::1: multihop"),
        ({"bgp_peers": "router:65001::false"}, "'router' is not an IP address"),
        ({"bgp_peers": "10.0.0.1:x::false"}, "not an integer"),
        ({"bgp_peers": None}, "bgp_enable without a peer"),
        ({"vip_leaderelection": "true"}, "announces from the Lease holder only"),
    ],
)
def test_bgp_refusals(env: dict[str, str | None], message: str) -> None:
    result = kubevip.convert(edited("kube-vip-pod-bgp.yaml", **env), "m.yaml")
    (error,) = result.errors
    assert message in error, error


def test_without_arp_bgp_or_a_table_there_is_nothing_vipd_does() -> None:
    text = edited("kube-vip-pod-bgp.yaml", bgp_enable="false")
    (error,) = kubevip.convert(text, "m.yaml").errors
    assert "neither bgp_enable nor vip_routingtable" in error


def edited(name: str, **env: str | None) -> str:
    """A fixture with env entries changed (a value) or removed (None), or added."""
    docs = list(yaml.safe_load_all((DATA / name).read_text()))
    spec = docs[0]["spec"]
    container = (spec.get("template", {}).get("spec") or spec)["containers"][0]
    items = [e for e in container["env"] if e["name"] not in env or env[e["name"]] is not None]
    for e in items:
        if e["name"] in env:
            e["value"] = env[e["name"]]
    known = {e["name"] for e in items}
    items += [{"name": k, "value": v} for k, v in env.items() if v is not None and k not in known]
    container["env"] = items
    return yaml.safe_dump_all(docs)


OFF = "kube-vip's BGP is off here (bgp_enable is not true): nothing to announce"


def test_bgp_beside_arp_and_leader_election_is_dropped() -> None:
    text = edited("kube-vip-pod-arp-le.yaml", bgp_enable="true", bgp_as="65000")
    result = kubevip.convert(text, "m.yaml")
    load(result)
    assert {(d.what, d.why) for d in result.dropped} == {
        ("env bgp_as=65000", OFF),
        ("env bgp_enable=true", OFF),
    }


def test_absent_settings_take_kube_vips_lease_name_and_vipds_timers() -> None:
    text = edited(
        "kube-vip-pod-arp-le.yaml",
        vip_leasename=None,
        vip_leaseduration=None,
        vip_renewdeadline=None,
        vip_retryperiod=None,
        cp_namespace=None,
    )
    lease = lease_of(load(kubevip.convert(text, "m.yaml")))
    assert (lease.name, lease.namespace, lease.duration) == ("plndr-cp-lock", "kube-system", 15)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"address": "api.example.com"}, "not a DNS name"),
        ({"vip_address": "192.168.0.41"}, "address and vip_address differ"),
        ({"cp_enable": "false"}, "cp_enable is not true"),
        ({"address": None}, "no address"),
        ({"vip_arpp": "true"}, "env vip_arpp: not a setting kube-vip reads"),
        ({"vip_leaseduration": "x"}, "vip_leaseduration=x: not a number"),
        (
            {"vip_renewdeadline": "6"},
            "vipd would refuse the result: election.lease.duration: must be greater",
        ),
    ],
)
def test_refusals(env: dict[str, str | None], message: str) -> None:
    result = kubevip.convert(edited("kube-vip-pod-arp-le.yaml", **env), "m.yaml")
    assert result.exit_code == EXIT_IMPORT_ERROR and result.yaml == ""
    (error,) = result.errors
    assert message in error, error


def test_a_manifest_without_kube_vip() -> None:
    result = kubevip.convert("apiVersion: v1\nkind: Pod\nspec:\n  containers: []\n", "x.yaml")
    assert result.errors == ("x.yaml: no kube-vip container (a Pod or DaemonSet running kube-vip)",)


def test_the_kubeadm_guides_example_with_vip_cidr() -> None:
    """kubeadm's HA guide shows a kube-vip v0.4.0 manifest (vip_cidr, vip_address, vip_ddns)."""
    text = edited(
        "kube-vip-pod-arp-le.yaml",
        address=None,
        vip_subnet=None,
        vip_address="192.168.0.40",
        vip_cidr="32",
        vip_ddns="false",
    )
    result = kubevip.convert(text, "m.yaml")
    assert str(load(result).vip) == "192.168.0.40"
    assert result.dropped == ()  # vip_ddns=false: a feature that is off loses nothing


def test_the_cli(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIPD_")}

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "vipd", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=60,
        )

    out = run("import", "kube-vip", str(DATA / "kube-vip-pod-arp-services.yaml"))
    assert out.returncode == 4
    assert len(out.stderr.splitlines()) == 2 and "svc_enable" in out.stderr
    assert run("check", "--offline", "-c", "-", stdin=out.stdout).returncode == 0
    out = run("import", "kube-vip", "-", stdin=(DATA / "kube-vip-pod-bgp.yaml").read_text())
    assert out.returncode == 4 and "mode: bgp" in out.stdout
    assert run("check", "--offline", "-c", "-", stdin=out.stdout).returncode == 0


def kube_vip_binary() -> str:
    """kube-vip from $VIPD_KUBE_BIN (what scripts/test exports), else the newest build of
    the fixtures' version under the cache (scripts/setup-kube builds it there)."""
    given = os.environ.get("VIPD_KUBE_BIN")
    root = Path(os.environ.get("VIPD_KUBE_CACHE", "/var/cache/vipd-kube"))
    if given:
        found = [p for p in [Path(given) / "kube-vip"] if os.access(p, os.X_OK)]
    else:
        found = sorted(root.glob(f"*kubevip-{KUBEVIP_VERSION}/kube-vip")) if root.is_dir() else []
    if not found:
        prereq.missing(
            f"needs kube-vip {KUBEVIP_VERSION} in {given or root} (built by scripts/setup-kube; "
            "CI has it only after setup-kube)"
        )
    version = subprocess.run(
        [str(found[-1]), "version"], capture_output=True, text=True, check=False, timeout=60
    ).stdout
    assert KUBEVIP_VERSION in version, (
        f"{found[-1]} is not kube-vip {KUBEVIP_VERSION} ({version.strip()!r}): regenerate the "
        "fixtures with the commands in their first lines and update KUBEVIP_VERSION"
    )
    return str(found[-1])


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_the_fixture_is_what_the_real_kube_vip_generates(path: Path) -> None:
    binary = kube_vip_binary()
    out = subprocess.run(
        [binary, *command_of(path)], capture_output=True, text=True, check=True, timeout=60
    )
    assert body(out.stdout) == body(path.read_text())

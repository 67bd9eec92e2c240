"""``vipd import keepalived`` (vipd/importers/keepalived.py) on real inputs: keepalived's own
example configurations as Debian ships them, the keepalived.conf of kubeadm's HA guide, and
small texts for each mapping and each refusal. Every config the importer prints is loaded
back with vipd's own loader (`vipd.config.parse`)."""

from __future__ import annotations

import glob
import os
import random
import subprocess
import sys
from ipaddress import ip_address
from pathlib import Path

import pytest
import yaml

from tests import prereq
from vipd import config, startup
from vipd.importers import EXIT_IMPORT_DROPPED, EXIT_IMPORT_ERROR, Imported, keepalived
from vipd.importers.command import braces
from vipd.importers.kaconf import Files

DATA = Path(__file__).parent / "data" / "import"
KUBEADM = DATA / "kubeadm-ha-keepalived.conf"
SAMPLES = Path("/usr/share/doc/keepalived/samples")
NOFS = Files(lambda p: "", lambda p: [])


def convert(text: str, name: str = "k.conf") -> Imported:
    return keepalived.convert(text, name, NOFS)


def load(result: Imported) -> config.Config:
    assert not result.errors, result.errors
    return config.parse(yaml.safe_load(result.yaml), env={}, hostname="test")


def dropped_whats(result: Imported) -> set[str]:
    return {d.what.split()[0] for d in result.dropped}


# -- keepalived's own examples ---------------------------------------------------------------

NO_INSTANCE = ("error", "no vrrp_instance: nothing to import")


def two(n: int, *names: str) -> tuple[str, str, tuple[str, ...]]:
    """The error for ``n`` IPv4 instances, which names each of them with its file and line."""
    return ("error", f"{n} IPv4 vrrp_instances: ", names)


# Every sample file Debian's keepalived package ships, and what the import must make of it:
# ("error", the start of the message) or ("partial", vips, vrid, priority, the keywords
# dropped). A sample without a vrrp_instance is LVS only: nothing to import.
V3 = ["192.168.200.16", "192.168.200.17", "192.168.200.18"]
SAMPLE_OUTCOMES: dict[str, tuple[object, ...]] = {
    "keepalived.conf.HTTP_GET.port": NO_INSTANCE,
    "keepalived.conf.IPv6": NO_INSTANCE,
    "keepalived.conf.PING_CHECK": NO_INSTANCE,
    "keepalived.conf.SMTP_CHECK": NO_INSTANCE,
    "keepalived.conf.UDP_CHECK": NO_INSTANCE,
    "keepalived.conf.fwmark": NO_INSTANCE,
    "keepalived.conf.inhibit": NO_INSTANCE,
    "keepalived.conf.misc_check": NO_INSTANCE,
    "keepalived.conf.misc_check_arg": NO_INSTANCE,
    "keepalived.conf.quorum": NO_INSTANCE,
    "keepalived.conf.status_code": NO_INSTANCE,
    "keepalived.conf.virtual_server_group": NO_INSTANCE,
    "keepalived.conf.virtualhost": NO_INSTANCE,
    "keepalived.conf.conditional_conf": ("error", "conditional line '@high'"),
    "keepalived.conf.vrrp": two(4, "VI_1", "VI_2", "VI_3", "VI_4"),
    "keepalived.conf.vrrp.localcheck": two(9, *(f"VI_{n}" for n in range(1, 10))),
    "keepalived.conf.vrrp.lvs_syncd": two(3, "VI_1", "VI_2", "VI_3"),
    "keepalived.conf.vrrp.scripts": two(3, "VI_1", "VI_2", "VI_3"),
    "keepalived.conf.vrrp.sync": two(9, *(f"VI_{n}" for n in range(1, 10))),
    "keepalived.conf.SSL_GET": (
        "partial",
        V3,
        51,
        100,
        {"auth_type", "state", "virtual_server", "router_id", "smtp_server"},
    ),
    "keepalived.conf.sample": (
        "partial",
        ["192.168.200.11", "192.168.200.12", "192.168.200.13"],
        50,
        100,
        {"virtual_server", "router_id", "notification_email"},
    ),
    "keepalived.conf.track_interface": (
        "partial",
        V3,
        51,
        100,
        {"state", "track_interface", "virtual_routes", "static_routes", "192.168.200.17"},
    ),
    "keepalived.conf.vrrp.routes": (
        "partial",
        V3,
        51,
        100,
        {"state", "virtual_routes", "static_routes", "192.168.200.17", "192.168.200.18"},
    ),
    "keepalived.conf.vrrp.rules": (
        "partial",
        V3,
        51,
        100,
        {"state", "virtual_rules", "static_rules", "192.168.200.17"},
    ),
    "keepalived.conf.vrrp.static_ipaddress": (
        "partial",
        ["192.168.200.20"],
        51,
        100,
        {"state", "static_ipaddress", "virtual_routes"},
    ),
}


def samples_dir() -> Path:
    if not SAMPLES.is_dir():
        prereq.missing(
            f"needs keepalived's samples in {SAMPLES} (apt-get install keepalived; "
            "scripts/setup does it)"
        )
    return SAMPLES


def read(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def real_files() -> Files:
    return Files(read, lambda p: [x for b in braces(p) for x in sorted(glob.glob(b))])


def test_the_table_names_every_sample() -> None:
    present = {p.name for p in samples_dir().glob("keepalived.conf*")}
    assert present == set(SAMPLE_OUTCOMES), present ^ set(SAMPLE_OUTCOMES)


@pytest.mark.parametrize("sample", sorted(SAMPLE_OUTCOMES))
def test_debian_sample(sample: str) -> None:
    path = samples_dir() / sample
    result = keepalived.convert(read(str(path)), str(path), real_files())
    expected = SAMPLE_OUTCOMES[sample]
    if expected[0] == "error":
        assert result.exit_code == EXIT_IMPORT_ERROR
        assert result.yaml == "" and len(result.errors) == 1
        message = result.errors[0]
        assert str(expected[1]) in message, message
        names = expected[2] if len(expected) > 2 else ()
        assert isinstance(names, tuple)
        for name in names:
            assert f"{name} ({path}:" in message, (name, message)
        return
    _, vips, vrid, priority, drops = expected
    assert result.exit_code == EXIT_IMPORT_DROPPED, result.errors
    cfg = load(result)
    assert [str(v) for v in cfg.vips] == vips
    assert cfg.election.vrrp.vrid == vrid
    assert cfg.election.vrrp.priority == priority
    assert cfg.election.vrrp.version == 2  # keepalived's default for IPv4
    assert cfg.election.mode == "vrrp"
    assert isinstance(drops, set)
    assert drops <= dropped_whats(result), dropped_whats(result)
    for d in result.dropped:
        assert d.where.startswith(f"{path}:") and d.why, d


# The samples with several IPv4 instances, one instance at a time (--instance): each imports,
# and these are the keywords (or addresses) dropped from it with a reason, besides the other
# instances. The global_defs of keepalived.conf.vrrp (mail settings, router_id) are MAIL.
MAIL = {"notification_email", "notification_email_from", "router_id", "smtp_connect_timeout"}
MAIL |= {"smtp_server"}
PER_INSTANCE: dict[str, dict[str, set[str]]] = {
    "keepalived.conf.vrrp": {
        # VI_1 lists 192.168.200.18 twice (the second with a label)
        "VI_1": MAIL | {"192.168.200.18", "smtp_alert", "state"},
        "VI_2": MAIL | {"smtp_alert"},
        "VI_3": MAIL | {"smtp_alert", "state"},
        "VI_4": MAIL | {"smtp_alert"},
    },
    "keepalived.conf.vrrp.localcheck": {
        # its scripts are "killall -0 sshd" and the like: no absolute path
        "VI_1": {"192.168.200.18/25", "state", "track_interface", "vrrp_script"},
        "VI_2": {"192.168.201.18/26", "state", "track_interface", "vrrp_script"},
        "VI_3": {"192.168.200.19/27"},
        "VI_4": {"192.168.201.19/28"},
        **{f"VI_{n}": {f"192.168.200.{15 + n}/27", "state"} for n in range(5, 10)},
    },
    "keepalived.conf.vrrp.lvs_syncd": {
        "VI_1": {"lvs_sync_daemon_interface", "state", "virtual_server", "vrrp_sync_group"},
        "VI_2": {"virtual_server", "vrrp_sync_group"},
        "VI_3": {"virtual_server", "vrrp_sync_group"},
    },
    "keepalived.conf.vrrp.scripts": {
        "VI_1": {"smtp_alert", "state", "vrrp_sync_group"},
        "VI_2": {"192.168.200.100/27", "state", "vrrp_sync_group"},
        "VI_3": {"192.168.200.101/27", "state", "vrrp_sync_group"},
    },
    "keepalived.conf.vrrp.sync": {
        "VI_1": {"192.168.200.18/25", "state", "vrrp_sync_group"},
        "VI_2": {"192.168.201.18/26", "state", "vrrp_sync_group"},
        "VI_3": {"192.168.200.19/27", "vrrp_sync_group"},
        "VI_4": {"192.168.201.19/28", "vrrp_sync_group"},
        **{
            f"VI_{n}": {f"192.168.200.{15 + n}/27", "state", "vrrp_sync_group"}
            for n in range(5, 10)
        },
    },
}


@pytest.mark.parametrize(
    ("sample", "name"),
    [(s, n) for s, names in sorted(PER_INSTANCE.items()) for n in names],
)
def test_debian_sample_one_instance_at_a_time(sample: str, name: str) -> None:
    expected = SAMPLE_OUTCOMES[sample]
    names = expected[2]
    assert expected[0] == "error" and isinstance(names, tuple) and name in names
    path = samples_dir() / sample
    result = keepalived.convert(read(str(path)), str(path), real_files(), [name])
    cfg = load(result)
    assert cfg.election.mode == "vrrp" and cfg.election.vrrp.version == 2
    others = {d.what for d in result.dropped if d.why == "not chosen with --instance"}
    assert others == {f"vrrp_instance {n}" for n in names if n != name}
    rest = {d.what.split()[0] for d in result.dropped if d.why != "not chosen with --instance"}
    assert rest == PER_INSTANCE[sample][name]


def test_an_ah_instance_is_imported_without_authentication() -> None:
    path = samples_dir() / "keepalived.conf.SSL_GET"
    result = keepalived.convert(read(str(path)), str(path), real_files())
    cfg = load(result)
    assert cfg.election.vrrp.auth_pass is None
    (ah,) = [d for d in result.dropped if d.what == "auth_type AH"]
    assert "not supported" in ah.why and ah.where == f"{path}:19"


# -- kubeadm's HA guide ----------------------------------------------------------------------


def test_kubeadm_ha_guide() -> None:
    result = keepalived.convert(read(str(KUBEADM)), "keepalived.conf", NOFS)
    cfg = load(result)
    assert cfg.vips == (ip_address("192.168.0.40"),)
    assert cfg.interface == "eth0"
    vrrp = cfg.election.vrrp
    assert (vrrp.vrid, vrrp.priority, vrrp.advert_interval, vrrp.version) == (51, 101, 1.0, 2)
    assert vrrp.auth_pass == "42"
    (track,) = cfg.track
    assert track.name == "check_apiserver"
    assert track.script == ("/etc/keepalived/check_apiserver.sh",)
    assert (track.interval, track.rise, track.fall, track.weight, track.fault) == (
        3.0,
        2,
        10,
        2,
        False,
    )
    assert {d.what for d in result.dropped} == {"router_id LVS_DEVEL", "state MASTER"}
    assert result.exit_code == EXIT_IMPORT_DROPPED
    # the comments say where each value came from
    assert "vrid: 51  # virtual_router_id (keepalived.conf:23)" in result.yaml


def vipd(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIPD_")}
    return subprocess.run(
        [sys.executable, "-m", "vipd", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )


def test_the_kubeadm_import_passes_vipd_check_offline(tmp_path: Path) -> None:
    out = vipd("import", "keepalived", str(KUBEADM))
    assert out.returncode == EXIT_IMPORT_DROPPED == 4, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 2, lines
    assert all(line.startswith("vipd import: dropped: ") for line in lines)
    assert any("state MASTER" in line and "kubeadm-ha-keepalived.conf:" in line for line in lines)
    conf = tmp_path / "vipd.yaml"
    conf.write_text(out.stdout)
    check = vipd("check", "--offline", "-c", str(conf))
    assert check.returncode == 0, check.stdout + check.stderr
    assert "valid" in check.stdout


def test_the_cli_exit_codes(tmp_path: Path) -> None:
    clean = tmp_path / "clean.conf"
    clean.write_text(
        "vrrp_instance A {\n interface eth0\n virtual_router_id 9\n priority 50\n"
        " version 3\n virtual_ipaddress {\n  10.0.0.9\n }\n}\n"
    )
    out = vipd("import", "keepalived", str(clean))
    assert (out.returncode, out.stderr) == (0, "")
    assert vipd("check", "--offline", "-c", "-", stdin=out.stdout).returncode == 0
    bad = tmp_path / "two.conf"
    bad.write_text(clean.read_text() + clean.read_text().replace("A {", "B {"))
    out = vipd("import", "keepalived", str(bad))
    assert out.returncode == EXIT_IMPORT_ERROR == 2
    assert out.stdout == ""
    assert f"A ({bad}:1), B ({bad}:10)" in out.stderr, out.stderr
    missing = vipd("import", "keepalived", str(tmp_path / "absent.conf"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr


# -- each mapping ------------------------------------------------------------------------------

INSTANCE = """vrrp_instance {name} {{
    interface eth0
    virtual_router_id 51
    priority 150
    advert_int {advert}
    {extra}
    virtual_ipaddress {{
        {vip}
    }}
}}
"""


def instance(name: str = "VI", vip: str = "10.0.0.100", advert: str = "1", extra: str = "") -> str:
    return INSTANCE.format(name=name, vip=vip, advert=advert, extra=extra)


def test_address_options() -> None:
    text = instance(vip="10.0.0.100 dev eth0\n 10.0.0.101/24\n 10.0.0.102 dev eth1 label x")
    result = convert(text)
    assert [str(v) for v in load(result).vips] == ["10.0.0.100", "10.0.0.101", "10.0.0.102"]
    assert [d.what for d in result.dropped] == ["10.0.0.101/24", "10.0.0.102 dev eth1 label x"]


def test_version_3_from_the_globals_and_a_fractional_interval() -> None:
    text = "global_defs {\n vrrp_version 3\n}\n" + instance(advert="0.05")
    cfg = load(convert(text))
    assert (cfg.election.vrrp.version, cfg.election.vrrp.advert_interval) == (3, 0.05)


def test_the_instance_version_wins_over_the_global_one() -> None:
    text = "global_defs {\n vrrp_version 3\n}\n" + instance(extra="version 2")
    assert load(convert(text)).election.vrrp.version == 2


def test_dual_stack_is_one_config_with_two_families() -> None:
    text = instance("V4", extra="version 3") + instance("V6", vip="fd00::100")
    result = convert(text)
    cfg = load(result)
    assert [str(v) for v in cfg.vips] == ["10.0.0.100", "fd00::100"]
    assert cfg.election.vrrp.version == 3
    assert result.exit_code == 0, result.dropped


def test_dual_stack_instances_that_differ_are_an_error() -> None:
    text = instance("V4", extra="version 3") + instance("V6", vip="fd00::100", advert="2")
    (error,) = convert(text).errors
    assert "V4 (k.conf:1) and V6 (k.conf:11) differ in advert_interval" in error


def test_dual_stack_with_a_v2_ipv4_instance_is_an_error() -> None:
    text = instance("V4") + instance("V6", vip="fd00::100")
    (error,) = convert(text).errors
    assert "V4 (k.conf:1) is VRRPv2" in error


def test_two_ipv6_instances_are_an_error_naming_both() -> None:
    text = instance("A", vip="fd00::1") + instance("B", vip="fd00::2")
    (error,) = convert(text, "/etc/k.conf").errors
    assert error.startswith("2 IPv6 vrrp_instances: A (/etc/k.conf:1), B (/etc/k.conf:11)")


def test_instance_chooses_among_several_of_one_family() -> None:
    text = instance("API") + instance("INGRESS", vip="10.0.0.200") + instance("V6", vip="fd00::1")
    text = text.replace("advert_int 1", "advert_int 1\n version 3")
    (error,) = convert(text).errors
    assert "choose one with --instance NAME" in error
    result = keepalived.convert(text, "k.conf", NOFS, instances=["API"])
    assert [str(v) for v in load(result).vips] == ["10.0.0.100"]
    assert [(d.what, d.where) for d in result.dropped] == [
        ("vrrp_instance INGRESS", "k.conf:12"),
        ("vrrp_instance V6", "k.conf:23"),
    ]
    result = keepalived.convert(text, "k.conf", NOFS, instances=["INGRESS", "V6"])
    assert [str(v) for v in load(result).vips] == ["10.0.0.200", "fd00::1"]
    (error,) = keepalived.convert(text, "k.conf", NOFS, instances=["API", "X"]).errors
    assert error == "k.conf: no vrrp_instance X (there are: API, INGRESS, V6)"


def test_the_samples_instance_can_be_chosen() -> None:
    path = samples_dir() / "keepalived.conf.vrrp"
    out = vipd("import", "keepalived", str(path), "--instance", "VI_1")
    assert out.returncode == EXIT_IMPORT_DROPPED, out.stderr
    assert config.parse(yaml.safe_load(out.stdout), env={}, hostname="t").election.vrrp.vrid == 51
    assert "dropped: vrrp_instance VI_2" in out.stderr
    wrong = vipd("import", "kube-vip", str(path), "--instance", "VI_1")
    assert wrong.returncode == 2 and "--instance is keepalived's" in wrong.stderr


def test_an_unknown_keyword_is_an_error() -> None:
    (error,) = convert(instance(extra="priorty 100")).errors
    assert error == "k.conf:6: unknown keyword 'priorty' in vrrp_instance VI"
    (error,) = convert("vrrp_instanse X {\n}\n").errors
    assert error == "k.conf:1: unknown keepalived section 'vrrp_instanse'"


def test_priority_255_and_master_without_priority_are_errors() -> None:
    (error,) = convert(instance().replace("priority 150", "priority 255")).errors
    assert "priority 255" in error and "k.conf:4" in error
    (error,) = convert(instance(extra="state MASTER").replace("priority 150", "")).errors
    assert "state MASTER without a priority" in error and "k.conf:6" in error


def test_a_value_vipd_refuses_is_an_error_not_a_config() -> None:
    (error,) = convert(instance(advert="0.015", extra="version 3")).errors
    assert error.startswith("vipd would refuse the result: election.vrrp.advert_interval")


def test_unicast_source_and_peers_become_one_list() -> None:
    extra = "unicast_src_ip 10.0.0.1\n unicast_peer {\n  10.0.0.2\n  10.0.0.3\n }"
    cfg = load(convert(instance(extra=extra)))
    assert [str(p) for p in cfg.election.vrrp.unicast_peers] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]


def test_password_with_v3_is_dropped_and_longer_ones_cut_as_keepalived_sends_them() -> None:
    auth = "authentication {\n auth_type PASS\n auth_pass 0123456789\n }"
    result = convert(instance(extra=auth))
    assert load(result).election.vrrp.auth_pass == "01234567"
    result = convert(instance(extra=auth + "\n version 3"))
    assert load(result).election.vrrp.auth_pass is None
    assert [d.why for d in result.dropped] == ["VRRPv3 has no authentication"]


def test_track_script_weights() -> None:
    scripts = (
        'vrrp_script down {\n script "/bin/check down"\n weight -20\n timeout 0.5\n}\n'
        "vrrp_script fault {\n script /bin/fault\n}\n"
        "vrrp_script up {\n script /bin/up\n weight 10\n}\n"
    )
    extra = "track_script {\n down\n fault\n up\n }"
    result = convert(scripts + instance(extra=extra))
    cfg = load(result)
    down, fault, up = cfg.track
    assert (down.script, down.weight, down.timeout, down.fault) == (
        ("/bin/check", "down"),
        20,
        0.5,
        False,
    )
    assert (fault.interval, fault.fault) == (1.0, True)  # keepalived: every 1 s, weight 0 = FAULT
    # keepalived: +10 while up; vipd: -10 while down from a base 10 higher
    assert (up.weight, cfg.election.vrrp.priority) == (10, 160)
    assert result.exit_code == 0


def test_a_weight_set_in_the_instance_overrides_the_script() -> None:
    text = "vrrp_script s {\n script /bin/s\n weight -5\n}\n"
    cfg = load(convert(text + instance(extra="track_script {\n s weight -30\n }")))
    assert cfg.track[0].weight == 30


def test_a_script_without_an_absolute_path_is_dropped() -> None:
    text = 'vrrp_script s {\n script "killall -0 haproxy"\n}\n'
    result = convert(text + instance(extra="track_script {\n s\n }"))
    assert load(result).track == ()
    assert "'killall'" in result.dropped[0].why


def test_track_file() -> None:
    text = "vrrp_track_file f {\n file /run/vipd/bias\n}\n"
    cfg = load(convert(text + instance(extra="track_file {\n f\n }")))
    assert cfg.track[0].file == "/run/vipd/bias"
    result = convert(text + instance(extra="track_file {\n f weight 5\n }"))
    assert load(result).track == () and "weight 1" in result.dropped[0].why


def test_notify_garp_preempt_vmac() -> None:
    extra = (
        'notify_master "/usr/local/bin/up arg"\n notify /usr/local/bin/all\n'
        " garp_master_delay 2\n garp_master_repeat 3\n garp_master_refresh 60\n"
        " preempt_delay 5\n use_vmac"
    )
    cfg = load(convert(instance(extra=extra)))
    assert cfg.notify.leader == ("/usr/local/bin/up", "arg")
    assert cfg.notify.all == ("/usr/local/bin/all",)
    assert (cfg.garp.delay, cfg.garp.repeat, cfg.garp.refresh) == (2.0, 3, 60.0)
    assert (cfg.election.vrrp.preempt, cfg.election.vrrp.preempt_delay) == (True, 5.0)
    assert cfg.election.vrrp.vmac is True
    cfg = load(convert(instance(extra="nopreempt")))
    assert cfg.election.vrrp.preempt is False


def test_virtual_server_on_6443_becomes_ipvs() -> None:
    server = (
        "virtual_server 10.0.0.100 6443 {\n lb_algo wlc\n lb_kind DR\n protocol TCP\n"
        " real_server 10.0.0.11 6443 {\n  weight 1\n  SSL_GET {\n   url {\n    path /readyz\n"
        "   }\n  }\n }\n real_server 10.0.0.12 6443 {\n }\n}\n"
        "virtual_server 10.0.0.100 80 {\n}\n"
    )
    result = convert(instance() + server)
    cfg = load(result)
    assert cfg.ipvs.enabled and cfg.health is not None
    assert [str(b) for b in cfg.ipvs.backends] == ["10.0.0.11", "10.0.0.12"]
    assert (cfg.ipvs.scheduler, cfg.ipvs.forwarding) == ("wlc", "dr")
    assert {d.what for d in result.dropped} == {"SSL_GET", "virtual_server 10.0.0.100 80"}


def test_includes_are_read_relative_to_the_including_file(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "vrrp.conf").write_text(instance())
    (tmp_path / "conf.d" / "scripts.conf").write_text("vrrp_script s {\n script /bin/s\n}\n")
    main = tmp_path / "keepalived.conf"
    main.write_text("include conf.d/{scripts,vrrp}.conf\n")
    result = keepalived.convert(main.read_text(), str(main), real_files())
    assert load(result).election.vrrp.vrid == 51
    out = vipd("import", "keepalived", str(main))
    assert out.returncode == 0, out.stderr
    assert f"# virtual_router_id ({tmp_path}/conf.d/vrrp.conf:3)" in out.stdout.replace(
        "vrid: 51  # ", "# "
    )


def test_mangled_configs_get_an_error_or_a_valid_config() -> None:
    """Bad input is an error line, never an exception or a config vipd refuses: the kubeadm
    config with words deleted, inserted or replaced (a fixed seed: the same 400 each run)."""
    rnd = random.Random(20261205)
    base = read(str(KUBEADM)).split(" ")
    vocabulary = ["{", "}", '"', "#", "\\", "weight", "-300", "x", "10.0.0.1", "fd00::1"]
    vocabulary += ["version", "3", "priority", "255", "0.001", "track_script", "AH", "include"]
    outcomes = {"error": 0, "config": 0}
    for _ in range(400):
        words = list(base)
        for _ in range(rnd.randint(1, 4)):
            j = rnd.randrange(len(words))
            op = rnd.random()
            if op < 0.4:
                del words[j]
            elif op < 0.8:
                words.insert(j, rnd.choice(vocabulary))
            else:
                words[j] = rnd.choice(vocabulary)
        result = convert(" ".join(words))
        if result.errors:
            assert result.yaml == "" and all(e.strip() for e in result.errors)
            outcomes["error"] += 1
        else:
            load(result)
            outcomes["config"] += 1
    assert min(outcomes.values()) > 20, outcomes  # both kinds of outcome were exercised


# -- auth_hmac (keepalived >= 2.4) -----------------------------------------------------------

HMAC_KEY = "hex:" + "ab" * 32


def test_auth_hmac_key_files_and_options_carry_over() -> None:
    block = (
        "auth_hmac {\n key 1 file:/etc/keepalived/keys/k1\n key 2 file:/etc/keepalived/keys/k2\n"
        " active_key 2\n anti_replay monotonic\n mode permissive\n }"
    )
    result = convert(instance(extra=block))
    assert not result.dropped
    hmac = load(result).election.vrrp.auth_hmac
    assert hmac is not None
    assert hmac.key_paths == {1: "/etc/keepalived/keys/k1", 2: "/etc/keepalived/keys/k2"}
    assert (hmac.send_key, hmac.anti_replay, hmac.mode) == (2, "monotonic", "permissive")
    timed = convert(instance(extra="auth_hmac {\n key 3 file:/k\n time_window 9\n }"))
    got = load(timed).election.vrrp.auth_hmac
    assert got is not None and (got.window, got.anti_replay) == (9, "time")


def test_an_auth_hmac_key_written_in_the_config_is_dropped_without_its_value() -> None:
    result = convert(instance(extra=f"auth_hmac {{\n key 7 {HMAC_KEY}\n }}"))
    hmac = load(result).election.vrrp.auth_hmac
    assert hmac is not None and hmac.key_paths == {7: "/etc/vipd/vrrp-key-7"}
    (d,) = result.dropped
    assert d.what == "auth_hmac key 7 (its value)" and "/etc/vipd/vrrp-key-7" in d.why
    # the secret is in neither the config nor the report of what was dropped
    assert "ab" * 32 not in result.yaml + d.line()


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ("auth_hmac {\n mode enforce\n }", "auth_hmac without a key"),
        ("auth_hmac {\n key 0 file:/k\n }", "ids are 1-255"),
        ("auth_hmac {\n key 1 file:/a\n key 1 file:/b\n }", "ids are 1-255, each once"),
        ("auth_hmac {\n key 1\n }", "takes an id and a value"),
        ("auth_hmac {\n key 1 file:/k\n hmac_len 8\n }", "unknown keyword 'hmac_len'"),
        ("auth_hmac {\n key 1 file:${_ENV X}/k\n }", "$NAME definitions are not supported"),
    ],
)
def test_auth_hmac_refusals(block: str, error: str) -> None:
    result = convert(instance(extra=block))
    assert result.yaml == "" and len(result.errors) == 1
    assert error in result.errors[0], result.errors


def test_an_auth_hmac_import_passes_vipd_check_with_its_key_file(tmp_path: Path) -> None:
    key = tmp_path / "k1"
    key.write_text(HMAC_KEY + "\n")
    key.chmod(0o600)
    src = tmp_path / "keepalived.conf"
    src.write_text(instance(extra=f"auth_hmac {{\n key 1 file:{key}\n }}"))
    out = vipd("import", "keepalived", str(src))
    assert out.returncode == 0, out.stderr
    conf = tmp_path / "vipd.yaml"
    conf.write_text(out.stdout)
    check = vipd("check", "--offline", "-c", str(conf))
    assert check.returncode == 0, check.stdout + check.stderr
    # the key file itself is read where vipd runs (vipd check on the node, vipd run)
    cfg = config.parse(yaml.safe_load(out.stdout), env={}, hostname="test")
    startup.check_auth_keys(cfg)
    key.chmod(0o644)  # keepalived only warns about a readable key; vipd refuses it
    with pytest.raises(config.ConfigError, match="group or others"):
        startup.check_auth_keys(cfg)

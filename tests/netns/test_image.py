"""vipd's container image, built with podman and run as the vipd of one lab node.

What it tests: the Containerfile builds (from a locally made Debian base: no registry is
reachable here, see tests/netns/podman.py) into an image whose entrypoint is ``vipd`` and
that holds no compiler, no lab and no test tools; run as the DaemonSet's container would be
(the rendered manifest's args and environment, ``--network=ns:`` of a lab node, only
NET_ADMIN and NET_RAW, a read-only root filesystem), it takes part in the election with two
vipd processes on the other nodes: with the highest priority it takes the VIP over, the
client reaches its node, its effective capabilities are exactly those two, and ``podman
stop`` (SIGTERM) hands the VIP over gracefully and exits 0.
"""

from __future__ import annotations

import functools
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.netns import waiting
from tests.netns.podman import IMAGE, Podman, missing_tools
from tests.prereq import missing
from vipd.lab.daemons import VipdDaemon, VrrpSpec
from vipd.lab.responder import Responder
from vipd.lab.topology import VIP4, Lab
from vipd.vrrp import state

ROOT = Path(__file__).resolve().parents[2]
ADVERT = 0.1
CAP_NET_ADMIN, CAP_NET_RAW = 12, 13


# Each poll here is costly (an HTTP request, a log read, podman): not every 10 ms.
wait_for = functools.partial(waiting.wait_for, step=0.02)


@pytest.fixture(scope="module")
def image(netns_ok: None) -> Iterator[Podman]:
    absent = missing_tools()
    if absent:
        missing(f"needs {', '.join(absent)} (scripts/setup installs them)")
    podman = Podman()
    started = time.monotonic()
    podman.ensure_base()
    base_s = time.monotonic() - started
    podman.build(ROOT)
    build_s = time.monotonic() - started - base_s
    print(f"\nimage: base ready in {base_s:.1f} s, build {build_s:.1f} s")
    yield podman


def test_image_has_vipd_as_entrypoint_and_no_compiler(image: Podman) -> None:
    inspect = image.cmd("image", "inspect", "--format", "{{json .Config}}", IMAGE)
    info = yaml.safe_load(inspect.stdout)
    assert info["Entrypoint"] == ["vipd"]
    out = image.cmd("run", "--rm", "--network=none", IMAGE, "version").stdout
    assert out.strip().startswith("vipd ")
    probe = image.cmd(
        "run", "--rm", "--network=none", "--entrypoint", "/bin/sh", IMAGE, "-c",
        "for c in gcc cc c++ g++ clang make ld; do command -v $c; done; true",
    ).stdout  # fmt: skip
    assert probe.strip() == "", f"build tools in the final image: {probe}"
    # The daemon and its runtime dependencies only: no lab (nor its test doubles), no test
    # tools, no pip.
    lab = image.cmd("run", "--rm", "--network=none", IMAGE, "lab", check=False)
    assert lab.returncode == 2 and "not installed" in lab.stderr, lab.stderr
    code = (
        "import importlib.util as u, sys; "
        "print([m for m in ('vipd.lab', 'vipd.lease.emulator', 'scapy', 'pytest', 'pip') "
        "if u.find_spec(m)])"
    )
    absent = image.cmd(
        "run", "--rm", "--network=none", "--entrypoint", "/opt/vipd/bin/python", IMAGE, "-c", code
    ).stdout  # fmt: skip
    assert absent.strip() == "[]", absent


def test_container_takes_part_in_the_election_with_only_two_capabilities(
    image: Podman, make_lab: Callable[..., Lab]
) -> None:
    lab = make_lab(3)
    spec = VrrpSpec(vip=VIP4, advert_interval=ADVERT)
    for n in lab.nodes:
        Responder(lab, n).start()
    others = {n.name: VipdDaemon(lab, n, spec, lab.nodes) for n in lab.nodes[:2]}
    for d in others.values():
        d.start(priority=100)
    assert wait_for(lambda: len(lab.holders(VIP4)) == 1, 10), lab.holders(VIP4)

    # The DaemonSet's container, as rendered, with n3's identity and a higher priority.
    config = lab.workdir / "vipd.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "vip": VIP4,
                "interface": "eth0",
                "election": {"vrrp": {"vrid": spec.vrid, "advert_interval": ADVERT}},
            }
        )
    )
    rendered = subprocess.run(
        [sys.executable, "-m", "vipd", "manifest", "daemonset", "--config", str(config)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    objs = [d for d in yaml.safe_load_all(rendered) if d]
    (ds,) = [d for d in objs if d["kind"] == "DaemonSet"]
    (config_map,) = [d for d in objs if d["kind"] == "ConfigMap"]
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    caps = c["securityContext"]["capabilities"]
    # The ConfigMap's files, mounted where the DaemonSet mounts them (read-only).
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "config"]
    config_dir = lab.workdir / "etc-vipd"
    config_dir.mkdir()
    for key, text in config_map["data"].items():
        (config_dir / key).write_text(text)
    n3 = lab.node("n3")
    name = f"vipd-{lab.prefix}-{secrets.token_hex(2)}"
    args = [
        "run", "--rm", "--name", name,
        f"--network=ns:/run/netns/{n3.ns}",
        *(f"--cap-drop={cap}" for cap in caps["drop"]),
        *(f"--cap-add={cap}" for cap in caps["add"]),
        *(["--read-only"] if c["securityContext"]["readOnlyRootFilesystem"] else []),
        "--security-opt=no-new-privileges",
        "-e", "NODE_NAME=n3", "-e", "VIPD_PRIORITY=200",
        "-v", f"{config_dir}:{mount['mountPath']}:ro",
        IMAGE, *c["args"],
    ]  # fmt: skip
    log = lab.workdir / "n3-container.log"
    proc = image.popen(args, log)
    try:
        bound = state.master_down_interval(3, 200, round(ADVERT * 100)) + 10.0  # + start-up
        assert wait_for(lambda: lab.holders(VIP4) == ["n3"], bound), log.read_text()
        status = image.cmd("exec", name, "cat", "/proc/1/status").stdout
        (cap_line,) = [ln for ln in status.splitlines() if ln.startswith("CapEff")]
        cap_eff = int(cap_line.split()[1], 16)
        assert cap_eff == (1 << CAP_NET_ADMIN) | (1 << CAP_NET_RAW), hex(cap_eff)
        assert _ask(lab) == "n3"
        for d in others.values():
            assert d.state() == "BACKUP", d.log_tail()

        image.cmd("stop", "--time", "20", name, timeout=60)  # SIGTERM, as the kubelet does
        assert proc.wait(timeout=30) == 0, log.read_text()
        assert wait_for(lambda: len(lab.holders(VIP4)) == 1 and "n3" not in lab.holders(VIP4), 5)
        text = log.read_text()
        assert "new leader heard: releasing the VIP" in text, text
    finally:
        if proc.poll() is None:
            image.cmd("kill", name, check=False)
            proc.wait(timeout=30)
        for d in others.values():
            d.stop(signal.SIGTERM)


def _ask(lab: Lab) -> str:
    code = textwrap.dedent(
        f"""
        import socket
        s = socket.create_connection(({VIP4!r}, 6443), timeout=1)
        print(s.recv(64).decode().strip())
        """
    )
    return lab.exec(lab.client_ns, [sys.executable, "-c", code], check=False).stdout.strip()

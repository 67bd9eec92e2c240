"""An imported config works beside the keepalived it came from: the migration that
docs/operations.md ("Replacing keepalived") describes, on Debian's keepalived, in network
namespaces.

What it tests: n1 runs keepalived with the configuration of kubeadm's HA guide
(tests/unit/data/import/kubeadm-ha-keepalived.conf: VRRPv2, ``auth_pass``, a ``vrrp_script``)
as its MASTER with priority 101; n2 runs vipd with the config ``vipd import keepalived`` made
of the same file as the guide's BACKUP node has it (``state BACKUP``, priority 100). vipd must
stay Backup past its Master_Down_Interval while keepalived holds the VIP (a wrong version,
password or interval in the import would make it a second master, and keepalived would log
the rejected advert), and take the VIP when keepalived's node dies.

Only the lab's names are changed in the text: the VIP, the interface (the lab's ``eth0`` is
the guide's too) and the track script (``/bin/true``, with keepalived's script security on).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.netns.test_interop import KEEPALIVED_RX_ERRORS
from vipd.importers import EXIT_IMPORT_DROPPED, keepalived
from vipd.importers.kaconf import Files
from vipd.lab.daemons import KeepalivedDaemon, VipdDaemon, VrrpSpec
from vipd.lab.topology import Lab, Node, vip_for

pytestmark = pytest.mark.netns

GUIDE = (
    Path(__file__).resolve().parents[1] / "unit" / "data" / "import" / "kubeadm-ha-keepalived.conf"
)
GUIDE_VIP = "192.168.0.40"
GUIDE_SCRIPT = "/etc/keepalived/check_apiserver.sh"
ADVERT = 1.0  # the guide sets no advert_int: keepalived's 1 s
STARTUP = 3.0  # s from spawn to a running vipd, at most


# keepalived 2.2.7 refuses (keepalived -t fails) to run a script as root without script
# security, and with it, a script in a directory others may write: the lab's check is /bin/true
SCRIPT = "/bin/true"
SECURITY = "router_id LVS_DEVEL\n    enable_script_security\n    script_user root"


def guide_for(state: str, priority: int) -> str:
    text = GUIDE.read_text()
    for old, new in (
        ("state MASTER", f"state {state}"),
        ("priority 101", f"priority {priority}"),
        (GUIDE_VIP, vip_for(4)),
        (GUIDE_SCRIPT, SCRIPT),
        ("router_id LVS_DEVEL", SECURITY),
    ):
        assert old in text, old
        text = text.replace(old, new)
    return text


class GuideKeepalived(KeepalivedDaemon):
    def __init__(self, lab: Lab, node: Node, text: str) -> None:
        super().__init__(lab, node, VrrpSpec(vip=vip_for(4), version=2, advert_interval=ADVERT), [])
        self.text = text

    def config(self) -> str:
        return self.text


class ImportedVipd(VipdDaemon):
    def __init__(self, lab: Lab, node: Node, imported: dict[str, Any]) -> None:
        super().__init__(lab, node, VrrpSpec(vip=vip_for(4), version=2, advert_interval=ADVERT), [])
        self.imported = imported

    def config(self) -> dict[str, Any]:
        return self.imported


def until(cond: Callable[[], bool], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_imported_backup_beside_the_guides_keepalived(
    make_lab: Callable[..., Lab], keepalived_ok: None
) -> None:
    lab = make_lab(2)
    n1, n2 = lab.nodes
    vip = vip_for(4)
    backup_text = guide_for("BACKUP", 100)
    result = keepalived.convert(backup_text, "keepalived.conf", Files(lambda p: "", lambda p: []))
    assert result.exit_code == EXIT_IMPORT_DROPPED, result.errors  # router_id, state
    imported = yaml.safe_load(result.yaml)
    assert imported["election"]["vrrp"]["version"] == 2
    assert imported["election"]["vrrp"]["auth_pass"] == "42"

    ka = GuideKeepalived(lab, n1, guide_for("MASTER", 101))
    vd = ImportedVipd(lab, n2, imported)
    try:
        ka.start()
        assert until(lambda: lab.holders(vip) == [n1.name], 10.0), ka.log_tail()
        vd.start()
        # past vipd's start-up and its Master_Down_Interval (3 x 1 s + 156/256 s), twice over
        watch = 2 * (STARTUP + 3 * ADVERT + (256 - 100) / 256)
        end = time.monotonic() + watch
        while time.monotonic() < end:
            assert lab.holders(vip) == [n1.name], (vd.log_tail(), ka.log_tail())
            time.sleep(0.1)
        assert vd.running(), vd.log_tail()
        assert vd.state() == "BACKUP", vd.log_tail()
        assert ka.state() == "MASTER", ka.log_tail()
        rejected = KEEPALIVED_RX_ERRORS.findall(ka.log_text())
        assert not rejected, ka.log_tail(40)

        # the keepalived node dies: the imported vipd takes over
        lab.set_link(n1, False)
        ka.stop(signal.SIGKILL)
        assert until(lambda: lab.holders(vip) == [n2.name], 3 * ADVERT + 1 + 2.0), vd.log_tail()
        assert vd.state() == "ACTIVE", vd.log_tail()
    finally:
        vd.stop(signal.SIGTERM)
        ka.stop(signal.SIGKILL)

"""The VRRPv3 checksum option on real kernels: a peer that sends the IPv4 checksum over the
message only (``election.vrrp.checksum: message-only``, RFC 9568 §5.2.8 read literally) and
a default vipd, which sends keepalived's pseudo-header form and accepts both.

What it tests: on the wire (tcpdump on the bridge ports, checked by ``vipd.lab.wire``, which
does not use vipd's codec) the option's adverts verify over the message alone and not in
keepalived's form, and the default node's verify in keepalived's form only. Each side
accepts the other: the message-only node leads and the default node stays a backup (no dual
master), counting the adverts as "message-only", with no checksum drops; then the leader
dies and the default node takes over, and the restarted message-only node preempts it back.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from typing import Any

from tests.netns.waiting import wait_for
from vipd.lab import faults
from vipd.lab.daemons import VipdDaemon, VrrpSpec
from vipd.lab.topology import VIP4, Lab
from vipd.lab.wire import Capture

SPEC = VrrpSpec(vip=VIP4, advert_interval=0.1)


class StrictVipd(VipdDaemon):
    def config(self) -> dict[str, Any]:
        out = super().config()
        out["election"]["vrrp"]["checksum"] = "message-only"
        return out


def test_a_message_only_peer_and_a_default_vipd_accept_each_other(
    make_lab: Callable[..., Lab],
) -> None:
    lab = make_lab(2)
    strict = StrictVipd(lab, lab.node("n1"), SPEC, lab.nodes)  # priority 200
    plain = VipdDaemon(lab, lab.node("n2"), SPEC, lab.nodes)  # priority 150
    cap = Capture(lab, lab.nodes)
    cap.start()
    try:
        strict.start()
        plain.start()
        assert wait_for(lambda: lab.holders(VIP4) == ["n1"], 15.0) is not None, strict.log_tail()
        assert wait_for(lambda: plain.state() == "BACKUP", 10.0) is not None, plain.log_tail()
        # n2 sends nothing while backup: kill n1, n2 leads, n1 comes back and preempts.
        faults.kill(lab, faults.NodeRig(lab.node("n1"), strict, None))
        # n1's copy of the VIP stays on its dead link if it died before seeing the link go down.
        assert wait_for(lambda: lab.wire_holders(VIP4) == ["n2"], 10.0) is not None, (
            plain.log_tail()
        )
        faults.restore(lab, faults.NodeRig(lab.node("n1"), strict, None, fault="kill"))
        assert wait_for(lambda: lab.holders(VIP4) == ["n1"], 15.0) is not None, strict.log_tail()
        assert plain.stop(signal.SIGTERM) == 0
        assert strict.stop(signal.SIGTERM) == 0
    finally:
        cap.stop()
    adverts = [a for a in cap.adverts() if a.priority > 0]
    by = {n: [a for a in adverts if a.sender == n] for n in ("n1", "n2")}
    assert by["n1"] and by["n2"], adverts[:5]
    assert all(a.message_only_ok and not a.checksum_ok for a in by["n1"]), by["n1"][:3]
    assert all(a.checksum_ok and not a.message_only_ok for a in by["n2"]), by["n2"][:3]
    # Each accepted the other's form: counted by form, none dropped for its checksum.
    for d, form in ((plain, "message-only"), (strict, "pseudo-header")):
        line = next(ln for ln in d.log_text().splitlines() if "msg=stopped" in ln)
        assert re.search(rf"checksum_forms=.*{form}.*: [1-9]", line), line
        assert "'checksum'" not in line, line

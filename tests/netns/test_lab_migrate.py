"""``vipd lab --from keepalived``: Debian's keepalived replaced by vipd node by node.

What it tests: the migration of docs/operations.md ("Replacing keepalived") as the lab runs
it (``vipd.lab.migrate``): three nodes under keepalived, then each node's keepalived stopped
and vipd started with what ``vipd import keepalived`` made of that node's keepalived.conf,
the backups first and the holder last. Replacing a backup must not move the VIP or cost the
client more than a few probe intervals; replacing the holder moves the VIP to the next node
(keepalived's priority-0 advert on SIGTERM: that node takes over at its Skew_Time, RFC 9568
§6.4.2) and back when the holder's vipd preempts; at no step two holders beyond a
make-before-break handover. A wrong version, password, interval or peer list in the import
would give two masters (vipd and keepalived would not hear each other) and fail this.
"""

from __future__ import annotations

import pytest

from vipd.lab import migrate
from vipd.lab.daemons import default_priority

pytestmark = pytest.mark.netns

MARGIN = 0.5  # s beyond a protocol time: scheduling on a shared 2-core machine
PROBE = 0.002  # s between the client's connects


@pytest.mark.parametrize(("version", "unicast"), [(2, False), (3, True)])
def test_keepalived_replaced_node_by_node(
    netns_ok: None, keepalived_ok: None, version: int, unicast: bool
) -> None:
    report = migrate.run(3, version, unicast)
    print("\n" + migrate.render(report))
    steps = report["steps"]
    assert [s["node"] for s in steps] == ["n3", "n2", "n1"]
    assert report["ok"], migrate.render(report)
    for s in steps[:2]:  # a backup replaced: nothing moves, the client barely notices
        assert not s["was_holder"] and s["moves"] == 0 and s["no_holder_ms"] == 0, s
        assert s["overlap_ms"] == 0 and s["failed_connects"] == 0, s
        assert s["client_gap_ms"] <= (10 * PROBE + MARGIN) * 1000, s
    last = steps[2]
    assert last["was_holder"] and last["holder_after"] == "n1", last
    assert last["moves"] == 2, last  # to n2 at keepalived's stop, back to n1's vipd
    skew = (256 - default_priority(2)) / 256 * 1.0  # n2's Skew_Time at 1 s adverts
    assert last["no_holder_ms"] <= (skew + MARGIN) * 1000, last
    assert last["client_gap_ms"] <= (skew + MARGIN) * 1000, last
    # what the import leaves out of the lab's keepalived.conf, and nothing else
    whats = {d.split(" (")[0] for s in steps for d in s["dropped"]}
    assert {w.split()[1] for w in whats} == {"router_id", "state", "10.77.0.100/32"}, whats

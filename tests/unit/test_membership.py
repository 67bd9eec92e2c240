"""vipd.membership: the pure policy (what the API's objects say, the merge, the admission
rule), the reader's fallback over the API servers, and the follower's rounds on fake
answers (bad objects counted and dropped, a failed read keeps the last good set)."""

from __future__ import annotations

import asyncio
import logging
from ipaddress import ip_address
from typing import Any, cast

import pytest

from vipd import config, metrics
from vipd.membership import policy
from vipd.membership.follower import MembershipFollower
from vipd.membership.reader import Reader, ReadError

A = ip_address


def slices(*addrs: str, ready: bool | None = None, kind: str = "IPv4") -> dict[str, Any]:
    cond = {} if ready is None else {"ready": ready}
    return {
        "items": [
            {"addressType": kind, "endpoints": [{"addresses": [a], "conditions": cond}]}
            for a in addrs
        ]
    }


def nodes(*addrs: str) -> dict[str, Any]:
    return {
        "items": [
            {
                "metadata": {"name": f"cp-{i}"},
                "status": {
                    "addresses": [
                        {"type": "Hostname", "address": f"cp-{i}"},
                        {"type": "InternalIP", "address": a},
                    ]
                },
            }
            for i, a in enumerate(addrs)
        ]
    }


# -- what the objects say -------------------------------------------------------------------


def test_slices_give_the_ready_addresses_of_both_families() -> None:
    data = slices("10.0.0.1", "10.0.0.2")
    data["items"] += slices("fd00::1", kind="IPv6")["items"]
    data["items"] += slices("10.0.0.9", ready=False)["items"]
    found = policy.from_slices(data)
    assert found == policy.Found(frozenset({A("10.0.0.1"), A("10.0.0.2"), A("fd00::1")}), 0)


def test_bad_slices_are_counted_and_dropped_not_raised() -> None:
    data = slices("10.0.0.1")
    data["items"] += [
        "not an object",
        {"addressType": "Banana"},
        {"addressType": "IPv4", "endpoints": "nope"},
        {"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.300", "0.0.0.0", 7]}]},
        {"addressType": "IPv4", "endpoints": [{"no": "addresses"}]},
    ]
    found = policy.from_slices(data)
    assert found.addresses == {A("10.0.0.1")}
    assert found.dropped == 1 + 1 + 1 + 3 + 1
    assert policy.from_slices(["a", "list"]) == policy.Found(frozenset(), 1)
    assert policy.from_slices({"items": 3}) == policy.Found(frozenset(), 1)


def test_nodes_give_their_internal_ips_and_bad_ones_are_counted() -> None:
    data = nodes("10.0.0.1", "10.0.0.2")
    data["items"] += [
        {"metadata": {"name": "no-status"}},
        {"status": {"addresses": [{"type": "InternalIP", "address": "cp-4.example"}]}},
        {"status": {"addresses": [{"type": "ExternalIP", "address": "192.0.2.7"}]}},
    ]
    found = policy.from_nodes(data)
    assert found.addresses == {A("10.0.0.1"), A("10.0.0.2")}
    assert found.dropped == 2


# -- the merge ------------------------------------------------------------------------------


def test_merge_keeps_the_static_order_adds_the_rest_sorted_and_never_self() -> None:
    static = (A("10.0.0.3"), A("10.0.0.1"), A("10.0.0.9"))
    got = policy.merge(
        static,
        {A("10.0.0.9"), A("10.0.0.5"), A("10.0.0.4"), A("fd00::4"), A("10.0.0.1")},
        own=frozenset({A("10.0.0.1")}),
        families=(4,),
    )
    assert got == (A("10.0.0.3"), A("10.0.0.9"), A("10.0.0.4"), A("10.0.0.5"))


def test_a_failed_or_empty_read_keeps_the_last_good_set() -> None:
    k = policy.Known().update("nodes", policy.Found(frozenset({A("10.0.0.1")})))
    assert k.update("nodes", None) is k
    assert k.update("nodes", policy.Found(frozenset(), dropped=2)) is k
    assert k.union(["nodes", "endpointslices"]) == frozenset({A("10.0.0.1")})
    assert policy.Known().union(["nodes"]) is None
    k2 = k.update("endpointslices", policy.Found(frozenset({A("10.0.0.2")})))
    assert k2.union(["nodes", "endpointslices"]) == frozenset({A("10.0.0.1"), A("10.0.0.2")})
    assert k2.update("nodes", policy.Found(frozenset({A("10.0.0.3")}))).sets["nodes"] == {
        A("10.0.0.3")
    }


def cfg_of(**extra: Any) -> config.Config:
    data: dict[str, Any] = {
        "node": "n",
        "vip": "10.0.0.100",
        "interface": "eth0",
        "election": {
            "vrrp": {
                "vrid": 5,
                "unicast_peers": ["10.0.0.1", "10.0.0.2"],
                "unicast_peers_from": ["endpointslices", "nodes"],
            }
        },
        **extra,
    }
    return config.parse(data, env={}, hostname=None)


def test_followed_lists_and_the_effective_config() -> None:
    cfg = cfg_of(
        health={},
        ipvs={"enabled": True, "backends": ["10.0.0.1"], "backends_from": ["nodes"]},
    )
    lists = policy.followed_lists(cfg)
    assert [f.key for f in lists] == [policy.UNICAST_PEERS, policy.IPVS_BACKENDS]
    assert policy.sources_of(lists) == ("endpointslices", "nodes")
    known = policy.Known({"nodes": frozenset({A("10.0.0.7"), A("10.0.0.1")})})
    merged = policy.merged(cfg, known, frozenset({A("10.0.0.2")}))
    assert merged[policy.UNICAST_PEERS] == (A("10.0.0.1"), A("10.0.0.7"))
    eff = policy.effective(cfg, merged)
    assert eff.ipvs.backends == (A("10.0.0.1"), A("10.0.0.7"))
    # The VRRP list goes to the driver, not through the config.
    assert eff.election == cfg.election


# -- the admission rule ---------------------------------------------------------------------


def test_a_node_in_the_static_list_is_never_held() -> None:
    adm = policy.Admission(frozenset({A("10.0.0.1")}), (A("10.0.0.1"), A("10.0.0.2")), 15)
    assert not adm.verdict(0, attempted=False, known=None).held
    assert not adm.verdict(0, attempted=True, known=frozenset({A("10.0.0.2")})).held


def test_a_new_node_waits_to_be_in_the_set_for_the_settle_time() -> None:
    own = frozenset({A("10.0.0.4")})
    adm = policy.Admission(own, (A("10.0.0.1"), A("10.0.0.2")), 15)
    assert adm.verdict(0, attempted=False, known=None).held  # before the first read
    others = frozenset({A("10.0.0.1"), A("10.0.0.2")})
    assert adm.verdict(1, attempted=True, known=others).held  # not in the set
    assert adm.verdict(11, attempted=True, known=others | own).held  # in it since 11
    assert adm.verdict(25.9, attempted=True, known=others | own).held
    assert not adm.verdict(26, attempted=True, known=others | own).held
    # Out of the set again: held, and the wait starts over once it is back.
    assert adm.verdict(30, attempted=True, known=others).held
    assert adm.verdict(31, attempted=True, known=others | own).held
    assert not adm.verdict(46, attempted=True, known=others | own).held


def test_a_node_that_reads_nothing_is_not_held() -> None:
    adm = policy.Admission(frozenset({A("10.0.0.4")}), (A("10.0.0.1"),), 15)
    v = adm.verdict(0, attempted=True, known=None)
    assert not v.held and "start probe" in v.why


# -- the reader: the API servers in order -------------------------------------------------


def test_the_reader_falls_back_to_the_next_api_server_and_says_which(monkeypatch: Any) -> None:
    m = config.Membership(
        api_servers=("https://127.0.0.1:6443", "https://10.0.0.100:6443"), kubeconfig="/x"
    )
    reader = Reader(m)
    monkeypatch.setattr(reader, "session", lambda server: server)

    def listing(server: str, source: str) -> Any:
        if server.startswith("https://127.0.0.1"):
            raise ConnectionRefusedError("refused")
        return {"server": server, "source": source}

    monkeypatch.setattr(reader, "_list", listing)
    server, data = reader.read("nodes")
    assert server == "https://10.0.0.100:6443" and data["source"] == "nodes"

    monkeypatch.setattr(reader, "_list", lambda s, src: (_ for _ in ()).throw(OSError("down")))
    with pytest.raises(ReadError, match=r"127\.0\.0\.1.*down.*10\.0\.0\.100.*down"):
        reader.read("nodes")


# -- the follower's rounds --------------------------------------------------------------------


class FakeReader:
    def __init__(self) -> None:
        self.answers: dict[str, Any] = {}

    def read(self, source: str) -> tuple[str, Any]:
        got = self.answers[source]
        if isinstance(got, Exception):
            raise got
        return "https://127.0.0.1:6443", got


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_follower_merges_counts_and_keeps_the_last_good_set(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cfg = cfg_of()
    applied: list[tuple[Any, Any]] = []
    fake = FakeReader()
    now = [100.0]
    f = MembershipFollower(
        cfg,
        frozenset({A("10.0.0.1")}),
        lambda eff, lists, verdict: applied.append((lists, verdict)),
        logging.getLogger("vipd"),
        reader=fake,
        clock=lambda: now[0],
    )
    key = policy.UNICAST_PEERS
    fails0 = sample("vipd_membership_read_failures_total", list=key)
    dropped0 = sample("vipd_membership_objects_dropped_total", source="nodes")
    bad = nodes("10.0.0.4")
    bad["items"].append({"status": {"addresses": "garbage"}})
    fake.answers = {"endpointslices": slices("10.0.0.1", "10.0.0.2"), "nodes": bad}
    asyncio.run(f.poll())
    lists, verdict = applied[-1]
    assert lists[key] == (A("10.0.0.2"), A("10.0.0.4"))
    assert verdict is not None and not verdict.held  # 10.0.0.1 is in the static list
    assert sample("vipd_membership_peers", list=key) == 2
    assert sample("vipd_membership_objects_dropped_total", source="nodes") == dropped0 + 1

    # The API goes away: the last good set stays, the failure is counted and logged.
    fake.answers = {"endpointslices": OSError("refused"), "nodes": OSError("refused")}
    with caplog.at_level(logging.WARNING, logger="vipd"):
        asyncio.run(f.poll())
    assert applied[-1][0][key] == (A("10.0.0.2"), A("10.0.0.4"))
    assert sample("vipd_membership_read_failures_total", list=key) == fails0 + 1
    assert "keeping the last good set" in caplog.text
    snap = f.snapshot()
    assert snap["failed_rounds"] == 1 and snap["lists"][0]["members"] == ["10.0.0.2", "10.0.0.4"]

    # A node is replaced: .4 leaves the Nodes, .5 joins both sources.
    fake.answers = {
        "endpointslices": slices("10.0.0.1", "10.0.0.2", "10.0.0.5"),
        "nodes": nodes("10.0.0.1", "10.0.0.2", "10.0.0.5"),
    }
    asyncio.run(f.poll())
    assert applied[-1][0][key] == (A("10.0.0.2"), A("10.0.0.5"))


def test_the_follower_holds_a_new_node_until_it_is_known() -> None:
    cfg = cfg_of()
    applied: list[Any] = []
    fake = FakeReader()
    now = [0.0]
    f = MembershipFollower(
        cfg,
        frozenset({A("10.0.0.4")}),
        lambda eff, lists, verdict: applied.append(verdict),
        logging.getLogger("vipd"),
        reader=fake,
        clock=lambda: now[0],
    )
    assert f.snapshot()["read"] is False and f.snapshot()["held"] is None  # no round yet
    fake.answers = {"endpointslices": slices("10.0.0.1", "10.0.0.2"), "nodes": nodes("10.0.0.1")}
    asyncio.run(f.poll())
    assert applied[-1].held and sample("vipd_membership_held") == 1
    snap = f.snapshot()
    assert snap["held"] is True and "not in the membership set" in snap["held_why"], snap
    assert snap["lists"] == [
        {
            "list": policy.UNICAST_PEERS,
            "from": ["endpointslices", "nodes"],
            "static": ["10.0.0.1", "10.0.0.2"],
            "members": ["10.0.0.1", "10.0.0.2"],
        }
    ]
    assert snap["read_through"] == {
        "endpointslices": "https://127.0.0.1:6443",
        "nodes": "https://127.0.0.1:6443",
    }
    fake.answers["nodes"] = nodes("10.0.0.1", "10.0.0.4")
    now[0] = 10
    asyncio.run(f.poll())
    assert applied[-1].held
    now[0] = 10 + cfg.membership.interval + 5
    asyncio.run(f.poll())
    assert not applied[-1].held and sample("vipd_membership_held") == 0


# -- the config's rules -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            {"election": {"vrrp": {"vrid": 5, "unicast_peers_from": ["nodes"]}}},
            "election.vrrp.unicast_peers_from: needs election.vrrp.unicast_peers",
        ),
        (
            {
                "election": {
                    "vrrp": {
                        "vrid": 5,
                        "unicast_peers": ["10.0.0.1"],
                        "unicast_peers_from": ["pods"],
                    }
                }
            },
            "election.vrrp.unicast_peers_from[0]: must be a list of membership sources",
        ),
        (
            {"election": {"vrrp": {"vrid": 5}}, "health": {"peers_from": ["nodes"]}},
            "health.peers_from: is only used with election.mode: lease",
        ),
        (
            {"election": {"vrrp": {"vrid": 5}}, "membership": {"api_servers": []}},
            "membership.api_servers: must be a list of 1 to 8 https://HOST[:PORT] URLs",
        ),
        (
            {"election": {"vrrp": {"vrid": 5}}, "membership": {"interval": 0.5}},
            "membership.interval: must be a number of seconds from 1 to 3600",
        ),
    ],
)
def test_config_rules_name_the_key(patch: dict[str, Any], message: str) -> None:
    data = {"node": "n", "vip": "10.0.0.100", "interface": "eth0", **patch}
    with pytest.raises(config.ConfigError) as err:
        config.parse(data, env={}, hostname=None)
    assert str(err.value).startswith(message), str(err.value)


# -- apply_to: the merged lists into the agent's parts -----------------------------------------


class FakeVrrp:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, bool, str]] = []

    def set_membership(self, peers: Any, held: bool, why: str) -> None:
        self.calls.append((peers, held, why))


class FakeLease:
    def __init__(self, cfg: config.Config) -> None:
        self.cfg = cfg
        self.reconfigured = 0

    @property
    def health_peers(self) -> list[Any]:
        h = self.cfg.health
        return [] if h is None else list(h.peers)

    def reconfigure(self, cfg: config.Config) -> None:
        self.cfg = cfg
        self.reconfigured += 1


class FakeHealth:
    def __init__(self) -> None:
        self.targets: list[set[Any]] = []

    def set_targets(self, targets: Any) -> None:
        self.targets.append(set(targets))


def test_apply_to_hands_each_list_to_its_part() -> None:
    from vipd.membership.follower import apply_to

    v = FakeVrrp()
    lists = {policy.UNICAST_PEERS: (A("10.0.0.2"), A("10.0.0.4"))}
    verdict = policy.Verdict(True, "not in the set")
    apply_to(cfg_of(), lists, verdict, elections=[cast(Any, v)], health=None, ipvs=None,
             health_peers=lambda: [])  # fmt: skip
    assert v.calls == [((A("10.0.0.2"), A("10.0.0.4")), True, "not in the set")]

    lease_cfg = config.parse(
        {"node": "n", "vip": "10.0.0.100", "interface": "eth0", "election": {"mode": "lease"},
         "health": {"peers": ["10.0.0.2"], "peers_from": ["nodes"]}},
        env={}, hostname=None,
    )  # fmt: skip
    e, h = FakeLease(lease_cfg), FakeHealth()
    lists = {policy.HEALTH_PEERS: (A("10.0.0.2"), A("10.0.0.5"))}
    eff = policy.effective(lease_cfg, lists)
    apply_to(eff, lists, None, elections=[cast(Any, e)], health=h, ipvs=None,
             health_peers=lambda: e.health_peers)  # fmt: skip
    assert e.reconfigured == 1 and e.health_peers == [A("10.0.0.2"), A("10.0.0.5")]
    assert h.targets[-1] == {A("10.0.0.2"), A("10.0.0.5")}
    # The same lists again: nothing to reconfigure.
    apply_to(eff, lists, None, elections=[cast(Any, e)], health=h, ipvs=None,
             health_peers=lambda: e.health_peers)  # fmt: skip
    assert e.reconfigured == 1


class FakeIpvs:
    def __init__(self, cfg: config.Config) -> None:
        self.cfg = cfg
        self.reconfigured = 0

    @property
    def spec(self) -> Any:
        return type("Spec", (), {"backends": self.cfg.ipvs.backends})()

    def reconfigure(self, cfg: config.Config) -> None:
        self.cfg = cfg
        self.reconfigured += 1


def test_apply_to_gives_ipvs_the_merged_backends_and_checks_them() -> None:
    from vipd.membership.follower import apply_to

    cfg = cfg_of(
        health={}, ipvs={"enabled": True, "backends": ["10.0.0.1"], "backends_from": ["nodes"]}
    )
    ipvs, h = FakeIpvs(cfg), FakeHealth()
    known = policy.Known({"nodes": frozenset({A("10.0.0.1"), A("10.0.0.6")})})
    lists = policy.merged(cfg, known, frozenset({A("10.0.0.9")}))
    eff = policy.effective(cfg, lists)
    apply_to(eff, lists, None, elections=[], health=h, ipvs=ipvs, health_peers=lambda: [])
    assert ipvs.reconfigured == 1 and ipvs.cfg.ipvs.backends == (A("10.0.0.1"), A("10.0.0.6"))
    assert h.targets[-1] == {A("10.0.0.1"), A("10.0.0.6")}
    apply_to(eff, lists, None, elections=[], health=h, ipvs=ipvs, health_peers=lambda: [])
    assert ipvs.reconfigured == 1  # unchanged: not reconfigured again


# -- the RBAC that vipd manifest rbac renders for membership -----------------------------------


@pytest.mark.parametrize(
    ("sources", "slices", "nodes_role"),
    [
        (["endpointslices"], True, False),
        (["nodes"], False, True),
        (["endpointslices", "nodes"], True, True),
        ([], False, False),
    ],
)
def test_rbac_grants_what_the_sources_read(
    sources: list[str], slices: bool, nodes_role: bool
) -> None:
    from vipd.deploy.manifest import Options, plan, rbac

    vrrp = {"vrid": 5, "unicast_peers": ["10.0.0.1"], "unicast_peers_from": sources}
    objs = rbac(plan({"vip": "10.0.0.100", "election": {"vrrp": vrrp}}), Options())
    rules = [
        (o["kind"], o["metadata"].get("namespace"), r)
        for o in objs
        if o["kind"] in ("Role", "ClusterRole")
        for r in o["rules"]
    ]
    slice_rule = ("Role", "default", {"apiGroups": ["discovery.k8s.io"],
                  "resources": ["endpointslices"], "verbs": ["list", "watch"]})  # fmt: skip
    node_rule = ("ClusterRole", None, {"apiGroups": [""], "resources": ["nodes"],
                 "verbs": ["list", "watch"]})  # fmt: skip
    assert (slice_rule in rules) == slices
    assert (node_rule in rules) == nodes_role
    assert len(rules) == slices + nodes_role  # nothing more
    assert bool(objs) == bool(sources)  # no API use, no ServiceAccount

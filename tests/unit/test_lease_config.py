"""election.lease: defaults, every rule, and one-line errors naming the key."""

from __future__ import annotations

from typing import Any

import pytest

from vipd.config import ConfigError, Lease, parse


def doc(**lease: Any) -> dict[str, Any]:
    return {"node": "cp-1", "vip": "10.0.0.100", "election": {"mode": "lease", "lease": lease}}


def error(data: object) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(data)
    assert "\n" not in str(info.value)
    return info.value


def test_defaults_are_client_gos_and_the_local_api_server() -> None:
    lease = parse(doc()).election.lease
    assert lease == Lease()
    assert lease is not None
    assert (lease.name, lease.namespace) == ("vipd-cp-lock", "kube-system")
    assert (lease.duration, lease.renew_deadline, lease.retry_period) == (15, 10.0, 2.0)
    assert lease.api_server == "https://127.0.0.1:6443" and lease.tls_server_name == "kubernetes"
    assert lease.kubeconfig is None and lease.keep_on_unreachable is True


def test_fast_profile_and_kube_vips_lease() -> None:
    lease = parse(
        doc(name="plndr-cp-lock", duration=5, renew_deadline=3, retry_period=1)
    ).election.lease
    assert lease is not None and (lease.name, lease.duration) == ("plndr-cp-lock", 5)


@pytest.mark.parametrize(
    ("timing", "key", "words"),
    [
        ({"duration": 10, "renew_deadline": 10}, "election.lease.duration", "greater than"),
        ({"renew_deadline": 2.4, "retry_period": 2}, "election.lease.renew_deadline", "1.2"),
        (
            {"duration": 1, "renew_deadline": 1, "retry_period": 1},
            "election.lease.renew_deadline",
            "1.2",
        ),
        ({"duration": 2.5}, "election.lease.duration", "whole number"),
        ({"duration": 0}, "election.lease.duration", "whole number"),
        ({"retry_period": 0}, "election.lease.retry_period", "0.05"),
        ({"renew_deadline": True}, "election.lease.renew_deadline", "seconds"),
    ],
)
def test_timing_rule(timing: dict[str, Any], key: str, words: str) -> None:
    e = error(doc(**timing))
    assert e.key == key and words in str(e)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("name", "Vipd"),
        ("name", "-x"),
        ("name", ""),
        ("namespace", "kube.system"),
        ("namespace", "a" * 64),
        ("kubeconfig", ""),
        ("kubeconfig", 5),
        ("api_server", "http://127.0.0.1:6443"),
        ("api_server", "127.0.0.1:6443"),
        ("tls_server_name", "not a name"),
        ("keep_on_unreachable", "yes"),
        ("bogus", 1),
    ],
)
def test_bad_values(key: str, value: object) -> None:
    assert error(doc(**{key: value})).key == f"election.lease.{key}"


def test_api_server_is_never_the_vip() -> None:
    e = error(doc(api_server="https://10.0.0.100:6443"))
    assert e.key == "election.lease.api_server" and "must not be the VIP" in str(e)
    ok = parse(doc(api_server="https://[fd00::1]:6443/", kubeconfig="in-cluster")).election.lease
    assert ok is not None and ok.api_server == "https://[fd00::1]:6443"
    assert parse(doc(api_server=None)).election.lease == Lease(api_server=None)


def test_other_modes_section_is_validated_but_may_stay() -> None:
    data = doc()
    data["election"]["vrrp"] = {"vrid": 51}
    assert parse(data).election.vrrp.vrid == 51
    data["election"]["vrrp"] = {"vrid": 300}
    assert error(data).key == "election.vrrp.vrid"
    vrrp_mode = {"vip": "10.0.0.100", "node": "n", "election": {"vrrp": {"vrid": 1}}}
    vrrp_mode["election"]["lease"] = {"duration": 1}  # type: ignore[index]
    assert error(vrrp_mode).key == "election.lease.duration"


def test_mode_is_one_of_two() -> None:
    data = doc()
    data["election"]["mode"] = "raft"
    e = error(data)
    assert e.key == "election.mode" and '"lease"' in str(e)

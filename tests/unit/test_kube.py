"""vipd.kube: one way to reach the API server for the Lease backend and IPVS discovery."""

from __future__ import annotations

import logging

import pytest

from vipd.config import ConfigError, IpvsDiscovery, Lease
from vipd.kube import ADMIN_CONF, Access, Credentials, Session, candidates


def test_each_user_names_its_own_key_in_errors() -> None:
    def none(_: str) -> bool:
        return False

    with pytest.raises(ConfigError) as lease:
        candidates(Access.from_lease(Lease(kubeconfig="/nope")), {}, none)
    with pytest.raises(ConfigError) as disc:
        candidates(Access.from_discovery(IpvsDiscovery(kubeconfig="/nope")), {}, none)
    assert lease.value.key == "election.lease.kubeconfig"
    assert disc.value.key == "ipvs.discovery.kubeconfig"


def test_discovery_reaches_the_local_api_server_like_the_lease_backend() -> None:
    lease, disc = Access.from_lease(Lease()), Access.from_discovery(IpvsDiscovery())
    assert (disc.api_server, disc.tls_server_name) == (lease.api_server, lease.tls_server_name)
    assert disc.api_server == "https://127.0.0.1:6443" and disc.tls_server_name == "kubernetes"


def test_admin_conf_brings_super_admin_conf_as_the_fallback() -> None:
    files = {ADMIN_CONF, "/etc/kubernetes/super-admin.conf"}
    creds = candidates(Access.from_discovery(IpvsDiscovery()), {}, files.__contains__)
    assert [c.label for c in creds] == [ADMIN_CONF, "/etc/kubernetes/super-admin.conf"]


def test_fall_back_only_when_not_authorised_and_only_once() -> None:
    access = Access.from_lease(Lease())
    s = Session(access, [Credentials("a", "/a"), Credentials("b", "/b")], logging.getLogger("t"))
    assert not s.fall_back(500) and s.using.label == "a"  # not a credentials problem
    assert s.fall_back(403) and s.using.label == "b"
    assert not s.fall_back(401) and s.using.label == "b"  # nothing left to try
    with pytest.raises(ValueError):
        Session(access, [])

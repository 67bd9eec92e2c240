"""The Lease API emulator and the driver's API layer, with the real ``kubernetes`` client.

No root: the emulator listens on 127.0.0.1 (a port the kernel picks) over real HTTPS. These
tests pin the API semantics the driver relies on (status codes, Status bodies,
resourceVersion), the outcome mapping of `LeaseApi`, the fault injection, the credential
rules of point 3 (admin.conf → super-admin.conf, in-cluster) and the MicroTime format.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from vipd.config import ConfigError, Lease
from vipd.kube import ADMIN_CONF, Access, Credentials, candidates
from vipd.lab.fakes.lease_emulator import Emulator
from vipd.lease import logic
from vipd.lease.api import LeaseApi
from vipd.lease.codec import microtime
from vipd.log import get as get_log

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"


@pytest.fixture
def emu(tmp_path: Path) -> Iterator[Emulator]:
    e = Emulator(tmp_path, ["n1", "n2", "admin", "super"], port=0)
    e.start()
    try:
        yield e
    finally:
        e.stop()


def raw(
    emu: Emulator,
    verb: str,
    path: str,
    body: Any = None,
    token: str | None = "",
    scheme: str = "Bearer",
) -> tuple[int, dict[str, Any]]:
    ctx = ssl.create_default_context(cafile=str(emu.ca_path))
    req = urllib.request.Request(emu.url + path, method=verb)
    if token is not None:
        req.add_header("Authorization", f"{scheme} {token or emu.token('n1')}")
    data = json.dumps(body).encode() if body is not None else None
    if data:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, data=data, context=ctx, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def lease_body(holder: str, rv: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "lock"}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 5,
            "renewTime": "2026-12-01T00:00:00.000001Z",
        },
    }


def api(emu: Emulator, client: str = "n1", **lease: Any) -> LeaseApi:
    cfg = Lease(name="lock", api_server=None, tls_server_name=None, **lease)
    path = str(emu.kubeconfig(client))
    return LeaseApi(cfg, [Credentials(path, path)], get_log())


def req(verb: logic.Verb, rv: str | None = None, holder: str | None = "n1") -> logic.Request:
    purpose = {
        logic.Verb.GET: logic.Purpose.READ,
        logic.Verb.CREATE: logic.Purpose.CREATE,
        logic.Verb.UPDATE: logic.Purpose.RENEW,
    }[verb]
    return logic.Request(
        1, verb, purpose, 2.0, resource_version=rv, holder=holder, duration_seconds=5,
        stamp_acquire=True,
    )  # fmt: skip


# -- the API as the real server has it --------------------------------------------------------


def test_status_codes_and_status_bodies(emu: Emulator) -> None:
    code, body = raw(emu, "GET", f"{LEASES}/lock", token=None)
    assert code == 401 and body["kind"] == "Status" and body["reason"] == "Unauthorized"
    code, body = raw(emu, "GET", f"{LEASES}/lock", token="wrong")
    assert code == 401
    code, body = raw(emu, "GET", f"{LEASES}/lock")
    assert (code, body["reason"], body["details"]["name"]) == (404, "NotFound", "lock")
    # In-cluster credentials send the scheme in lower case; it is case-insensitive.
    code, body = raw(emu, "GET", f"{LEASES}/lock", scheme="bearer")
    assert code == 404
    code, body = raw(emu, "GET", f"{LEASES}/lock", scheme="Basic")
    assert code == 401
    code, body = raw(emu, "POST", LEASES, lease_body("n1"))
    assert code == 201 and body["spec"]["holderIdentity"] == "n1"
    rv = body["metadata"]["resourceVersion"]
    code, body = raw(emu, "POST", LEASES, lease_body("n2"))
    assert (code, body["reason"]) == (409, "AlreadyExists")
    code, body = raw(emu, "PUT", f"{LEASES}/lock", lease_body("n2", rv))
    assert code == 200 and int(body["metadata"]["resourceVersion"]) > int(rv)
    code, body = raw(emu, "PUT", f"{LEASES}/lock", lease_body("n3", rv))  # stale
    assert (code, body["reason"]) == (409, "Conflict") and "modified" in body["message"]
    bad = lease_body("n2")
    bad["spec"]["renewTime"] = "2026-12-01T00:00:00Z"  # not MicroTime
    assert raw(emu, "PUT", f"{LEASES}/lock", bad)[0] == 400
    bad = lease_body("n2")
    bad["spec"]["leaseDurationSeconds"] = 0
    assert raw(emu, "PUT", f"{LEASES}/lock", bad)[0] == 422
    code, body = raw(emu, "GET", LEASES)
    assert code == 200 and body["kind"] == "LeaseList" and len(body["items"]) == 1
    assert raw(emu, "DELETE", f"{LEASES}/lock")[0] == 200
    assert raw(emu, "DELETE", f"{LEASES}/lock")[0] == 404


def test_certificate_names_kubernetes(emu: Emulator) -> None:
    """kubeadm's serving certificate always has "kubernetes"; so has the emulator's, so the
    driver's default tls_server_name is exercised for real."""
    a = LeaseApi(
        Lease(name="lock", api_server=emu.url, tls_server_name="kubernetes"),
        [Credentials("k", str(emu.kubeconfig("n1")))],
        get_log(),
    )
    assert isinstance(a.call(req(logic.Verb.GET)), logic.NotFound)
    wrong = LeaseApi(
        Lease(name="lock", api_server=emu.url, tls_server_name="not-in-the-cert"),
        [Credentials("k", str(emu.kubeconfig("n1")))],
        get_log(),
    )
    out = wrong.call(req(logic.Verb.GET))
    assert isinstance(out, logic.Unreachable) and "certificate" in out.detail.lower()


# -- the driver's outcome mapping, with the real client --------------------------------------


def test_create_get_update_conflict_through_the_client(emu: Emulator) -> None:
    a, b = api(emu, "n1"), api(emu, "n2")
    assert isinstance(a.call(req(logic.Verb.GET)), logic.NotFound)
    made = a.call(req(logic.Verb.CREATE))
    assert isinstance(made, logic.Ok) and made.record.holder == "n1"
    assert isinstance(b.call(req(logic.Verb.CREATE, holder="n2")), logic.Conflict)
    got = b.call(req(logic.Verb.GET))
    assert isinstance(got, logic.Ok) and got.record == made.record
    rv = made.record.resource_version
    renewed = a.call(req(logic.Verb.UPDATE, rv))
    assert isinstance(renewed, logic.Ok) and renewed.record.resource_version != rv
    assert isinstance(b.call(req(logic.Verb.UPDATE, rv, holder="n2")), logic.Conflict)
    released = a.call(req(logic.Verb.UPDATE, renewed.record.resource_version, holder=None))
    assert isinstance(released, logic.Ok) and released.record.holder is None
    stored = emu.store.get("kube-system", "lock")
    assert stored is not None and "holderIdentity" not in stored["spec"]


def test_annotations_survive_a_renewal(emu: Emulator) -> None:
    a = api(emu)
    made = a.call(req(logic.Verb.CREATE))
    assert isinstance(made, logic.Ok)
    obj = emu.store.get("kube-system", "lock")
    assert obj is not None
    obj["metadata"]["annotations"] = {"team": "platform"}
    assert raw(emu, "PUT", f"{LEASES}/lock", obj)[0] == 200
    got = a.call(req(logic.Verb.GET))
    assert isinstance(got, logic.Ok)
    assert isinstance(a.call(req(logic.Verb.UPDATE, got.record.resource_version)), logic.Ok)
    after = emu.store.get("kube-system", "lock")
    assert after is not None and after["metadata"]["annotations"] == {"team": "platform"}


@pytest.mark.parametrize(
    ("code", "kind"), [(500, "http-500"), (503, "http-503"), (429, "http-429")]
)
def test_server_errors_are_unavailable(emu: Emulator, code: int, kind: str) -> None:
    emu.set_errors(1.0, code)
    out = api(emu).call(req(logic.Verb.GET))
    assert isinstance(out, logic.Unavailable) and logic.outcome_kind(out) == kind


def test_writes_only_errors_leave_reads(emu: Emulator) -> None:
    emu.set_errors(1.0, 503, writes_only=True)
    a = api(emu)
    assert isinstance(a.call(req(logic.Verb.GET)), logic.NotFound)
    assert isinstance(a.call(req(logic.Verb.CREATE)), logic.Unavailable)


def test_stall_is_unreachable_within_the_request_timeout(emu: Emulator) -> None:
    emu.stall(5.0)
    started = time.monotonic()
    r = logic.Request(1, logic.Verb.GET, logic.Purpose.READ, 0.5)
    out = api(emu).call(r)
    took = time.monotonic() - started
    assert isinstance(out, logic.Unreachable)
    assert took < 2.0  # the explicit total timeout, not the client's default
    emu.heal()


def test_partition_is_per_client(emu: Emulator) -> None:
    emu.partition("n1")
    r = logic.Request(1, logic.Verb.GET, logic.Purpose.READ, 0.5)
    assert isinstance(api(emu, "n1").call(r), logic.Unreachable)
    assert isinstance(api(emu, "n2").call(r), logic.NotFound)
    emu.heal("n1")
    assert isinstance(api(emu, "n1").call(r), logic.NotFound)
    logged = emu.requests("n1")
    assert sorted(e.status for e in logged) == [0, 404]  # the stalled one logs when it ends


def test_rejected_and_unreachable(emu: Emulator, tmp_path: Path) -> None:
    emu.partition("n1", mode="status", code=403)
    out = api(emu).call(req(logic.Verb.GET))
    assert isinstance(out, logic.Rejected) and out.status == 403
    dead = LeaseApi(
        Lease(name="lock", api_server="https://127.0.0.1:1", tls_server_name=None),
        [Credentials("k", str(emu.kubeconfig("n2")))],
        get_log(),
    )
    out2 = dead.call(req(logic.Verb.GET))
    assert isinstance(out2, logic.Unreachable) and "refused" in out2.detail.lower()


# -- credentials (point 3) ----------------------------------------------------------------------


def test_admin_conf_falls_back_to_super_admin_conf_on_403(emu: Emulator, tmp_path: Path) -> None:
    """Kubernetes >= 1.29, first `kubeadm init`: admin.conf is not authorised yet."""
    emu.partition("admin", mode="status", code=403)
    conf = tmp_path / "etc"
    conf.mkdir()
    admin, sup = conf / "admin.conf", conf / "super-admin.conf"
    admin.write_text(emu.kubeconfig("admin").read_text())
    sup.write_text(emu.kubeconfig("super").read_text())
    lease = Lease(name="lock", api_server=None, tls_server_name=None, kubeconfig=str(admin))
    creds = candidates(Access.from_lease(lease), {}, lambda p: Path(p).exists())
    assert [c.label for c in creds] == [str(admin), str(sup)]
    a = LeaseApi(lease, creds, get_log())
    assert isinstance(a.call(req(logic.Verb.GET)), logic.NotFound)
    assert a.using.label == str(sup)
    assert [(e.client, e.status) for e in emu.requests()] == [("admin", 403), ("super", 404)]


def test_credential_rules() -> None:
    lease = Lease()

    def none(_: str) -> bool:
        return False

    with pytest.raises(ConfigError, match="not a pod"):
        candidates(Access.from_lease(lease), {}, none)
    pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    assert candidates(Access.from_lease(lease), pod, none) == [Credentials("in-cluster", None)]
    # admin.conf on the host wins over in-cluster (a static pod with the hostPath mount)
    assert (
        candidates(Access.from_lease(lease), pod, lambda p: p == ADMIN_CONF)[0].kubeconfig
        == ADMIN_CONF
    )
    with pytest.raises(ConfigError, match="does not exist"):
        candidates(Access.from_lease(Lease(kubeconfig="/nope")), pod, none)
    with pytest.raises(ConfigError, match="needs a pod"):
        candidates(Access.from_lease(Lease(kubeconfig="in-cluster")), {}, none)


def test_microtime_always_has_six_digits() -> None:
    t = datetime(2026, 12, 1, 0, 0, 0, tzinfo=UTC)
    assert microtime(t).isoformat() == "2026-12-01T00:00:00.000001+00:00"
    t2 = t.replace(microsecond=250000)
    assert microtime(t2) == t2


def test_start_check_refuses_an_unloadable_kubeconfig(tmp_path: Path) -> None:
    from vipd.config import parse
    from vipd.lease.api import check

    bad = tmp_path / "admin.conf"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: 5\n")
    cfg = parse(
        {
            "node": "cp-1",
            "vip": "10.0.0.100",
            "election": {"mode": "lease", "lease": {"kubeconfig": str(bad)}},
        }
    )
    with pytest.raises(ConfigError) as info:
        check(cfg, env={})
    assert info.value.key == "election.lease.kubeconfig" and "cannot be loaded" in str(info.value)
    missing = parse(
        {
            "node": "cp-1",
            "vip": "10.0.0.100",
            "election": {"mode": "lease", "lease": {"kubeconfig": str(tmp_path / "nope")}},
        }
    )
    with pytest.raises(ConfigError, match="does not exist"):
        check(missing, env={})

"""The Lease API calls: one blocking call of the ``kubernetes`` client per core `Request`,
with an explicit total timeout, its answer as the core's outcome.

What it is
    `LeaseApi` turns the core's `Request` into one call of ``CoordinationV1Api`` (read,
    create, replace) with ``_request_timeout`` set to the timeout the core asked for, and
    the answer into an `Outcome` (`vipd.lease.model.classify` tells etcd's store-wide
    refusal from this API server's own trouble); on a 401/403 it falls back to the next
    credentials (``vipd.kube``: the local API server, then ``super-admin.conf``). It also
    starts the watch on the Lease (``vipd.lease.watch``). `Api` is what the election needs
    of it (the unit tests answer in memory instead); `open_api` opens it for this host's
    credentials; `check` is the start-up check of ``vipd run``/``check``.

What it must not do
    Run on the event loop (every method blocks: the election runs them on its thread pool),
    decide anything, or retry on its own (one call per request; the core decides what
    next). Nothing it raises escapes: every failure is an outcome.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from vipd import kube
from vipd.config import Config, Lease
from vipd.kube import Credentials
from vipd.lease import model
from vipd.lease import watch as lease_watch
from vipd.lease.codec import lease_body, to_record

__all__ = ["Api", "ApiFactory", "LeaseApi", "check", "open_api"]


def check(cfg: Config, env: dict[str, str] | None = None) -> None:
    """Start-up check for ``vipd run``/``check``: raises `ConfigError` (exit 2)."""
    if cfg.election.mode != "lease" or cfg.election.lease is None:
        return
    kube.check(kube.Access.from_lease(cfg.election.lease), env)


class LeaseApi:
    """Blocking calls to the API server; every method runs in an executor thread."""

    def __init__(self, lease: Lease, creds: list[Credentials], log: logging.Logger) -> None:
        self.lease = lease
        self.log = log
        self.session = kube.Session(kube.Access.from_lease(lease), creds, log)
        self._api: Any = None
        self._last: Any = None  # the last V1Lease we read or wrote (to keep its metadata)

    @property
    def using(self) -> Credentials:
        return self.session.using

    def _client(self) -> Any:
        if self._api is None:
            from kubernetes import client

            self._api = client.CoordinationV1Api(self.session.api_client())
        return self._api

    def watch(self, deliver: lease_watch.Deliver, stop: threading.Event, retry: float) -> None:
        """Watch the Lease on the calling thread until ``stop`` (`vipd.lease.watch`)."""
        lease_watch.watch_lease(
            self._client,
            self.lease.namespace,
            self.lease.name,
            deliver,
            stop,
            retry,
            self.log,
            to_record,
        )

    def call(self, req: model.Request) -> model.Outcome:
        outcome = self._call(req)
        if isinstance(outcome, model.Rejected) and self.session.fall_back(outcome.status):
            self._api = None
            outcome = self._call(req)
        return outcome

    def _call(self, req: model.Request) -> model.Outcome:
        from kubernetes.client import ApiException

        try:
            api = self._client()
            name, ns = self.lease.name, self.lease.namespace
            if req.verb is model.Verb.GET:
                obj = api.read_namespaced_lease(name, ns, _request_timeout=req.timeout)
            elif req.verb is model.Verb.CREATE:
                obj = api.create_namespaced_lease(
                    ns, lease_body(req, name, ns, self._last), _request_timeout=req.timeout
                )
            else:
                obj = api.replace_namespaced_lease(
                    name, ns, lease_body(req, name, ns, self._last), _request_timeout=req.timeout
                )
            self._last = obj
            return model.Ok(to_record(obj))
        except ApiException as exc:
            # The core tells a store-wide refusal (NOSPACE) from this API server's own
            # trouble (5xx, 429) by the status and the message.
            return model.classify(int(exc.status or 0), _status_message(exc))
        except Exception as exc:  # urllib3 timeouts/connection/TLS errors, a bad answer
            return model.Unreachable(f"{type(exc).__name__}: {_short(exc)}")


def _status_message(exc: Any) -> str:
    import json

    try:
        body = json.loads(exc.body or "{}")
        return str(body.get("message") or exc.reason or "")[:200]
    except (ValueError, TypeError, AttributeError):
        return str(getattr(exc, "reason", ""))[:200]


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 160 else text[:157] + "..."


class Api(Protocol):
    """What the election needs of `LeaseApi` (an in-memory store in the unit tests)."""

    @property
    def using(self) -> Credentials: ...

    def call(self, req: model.Request) -> model.Outcome: ...


ApiFactory = Callable[[Lease, logging.Logger], Api]


def open_api(lease: Lease, log: logging.Logger) -> Api:
    """The API client for this host's credentials (``vipd.kube.candidates``)."""
    session = kube.Session.open(kube.Access.from_lease(lease), log)
    return LeaseApi(lease, session.creds, log)

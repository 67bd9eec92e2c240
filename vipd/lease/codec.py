"""The Lease codec: a ``coordination.k8s.io/v1`` Lease object of the ``kubernetes`` client
and the core's `Record` and `Request`, both ways.

What it is
    `to_record`: a ``V1Lease`` (read, created or replaced) as the core's `vipd.lease.model.Record`
    (an empty ``holderIdentity`` is no holder; the times kept as text, for logs only).
    `lease_body`: the ``V1Lease`` a write `Request` sends, with ``renewTime`` (and, for a new
    holder, ``acquireTime``) stamped now, and the metadata of the last object seen when the
    write is based on it (labels and annotations someone else put on the Lease stay).

    ``MicroTime`` values are sent with a non-zero microsecond: the client formats datetimes
    with ``isoformat()``, which drops the fraction when it is zero, and the API server only
    parses ``MicroTime`` with exactly six digits.

What it must not do
    Call the API server (``vipd.lease.api`` does) or decide anything (the core does). It
    reads the wall clock for the timestamps only: they are for humans and other tools, and
    the core never reads them back for a decision.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from vipd.lease import model

__all__ = ["lease_body", "microtime", "to_record"]


def microtime(now: datetime | None = None) -> datetime:
    """A UTC time that the client serialises with six fractional digits (see the docstring)."""
    t = now or datetime.now(UTC)
    return t if t.microsecond else t.replace(microsecond=1)


def to_record(obj: Any) -> model.Record:
    spec = obj.spec
    meta = obj.metadata

    def t(v: Any) -> str | None:
        return v.isoformat() if isinstance(v, datetime) else (str(v) if v else None)

    return model.Record(
        resource_version=str(meta.resource_version),
        holder=(spec.holder_identity or None) if spec else None,
        duration_seconds=spec.lease_duration_seconds if spec else None,
        transitions=(spec.lease_transitions or 0) if spec else 0,
        acquire_time=t(spec.acquire_time) if spec else None,
        renew_time=t(spec.renew_time) if spec else None,
    )


def lease_body(req: model.Request, name: str, namespace: str, last: Any) -> Any:
    """The ``V1Lease`` to send for write ``req``; ``last``: the last ``V1Lease`` read or
    written (its metadata is kept when ``req`` is based on its ``resourceVersion``)."""
    from kubernetes import client

    now = microtime()
    if req.stamp_acquire or not req.acquire_time:
        acquire = now
    else:
        acquire = microtime(datetime.fromisoformat(req.acquire_time))
    spec = client.V1LeaseSpec(
        holder_identity=req.holder,
        lease_duration_seconds=req.duration_seconds,
        acquire_time=acquire,
        renew_time=now,
        lease_transitions=req.transitions,
    )
    if (
        req.verb is model.Verb.UPDATE
        and last is not None
        and last.metadata is not None
        and last.metadata.resource_version == req.resource_version
    ):
        # Keep labels and annotations someone else put on the Lease.
        meta = last.metadata
    else:
        meta = client.V1ObjectMeta(name=name, namespace=namespace)
        if req.resource_version is not None:
            meta.resource_version = req.resource_version
    return client.V1Lease(metadata=meta, spec=spec)

"""The watch on the Lease: every change of the one Lease, as the core's records, from a thread.

What it is
    `watch_lease` runs a Kubernetes watch (``GET …/leases?watch=true`` with a field selector
    on the Lease's name, through the ``kubernetes`` client's ``watch.Watch``) on the calling
    thread until ``stop`` is set, and hands every event to ``deliver``: the Lease as a
    `vipd.lease.model.Record`, or ``None`` when it was deleted. The driver
    (``vipd.lease.driver``) runs it on a thread of its own and passes each event to
    `vipd.lease.logic.Elector.watched`, so a leader learns of a write it did not make
    (``kubectl patch``, ``edit``, ``delete``) within the watch's delay instead of at its
    next renewal (docs/design/lease.md, "When someone else writes the Lease").

    The first request asks for the current state (an ``ADDED`` event for an existing Lease:
    the core ignores what is no newer than what it has seen); each later one resumes from the
    last ``resourceVersion`` received, so no write in between is missed. A stream the server
    ends (``timeoutSeconds``) is resumed at once; ``410 Gone`` (the version was compacted)
    and any failure start over from the current state one ``retry`` later, doubling the wait
    while failures follow each other (up to ``MAX_BACKOFF``; a 401/403, RBAC without
    ``list``/``watch``, waits ``FORBIDDEN_WAIT``).

What it must not do
    Decide anything (the core does), or be needed for safety: it only shortens the time a
    displaced holder keeps the VIP, and the core's own rules hold without it (a renewal's
    409 and read, the renew deadline, and the new holder's wait before it binds).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from vipd.lease import model

# The server ends each watch after this long (it is resumed from the last version seen);
# a read that waits longer than this plus a margin means the connection is dead.
STREAM_SECONDS = 30
READ_MARGIN = 5.0
# After a 401/403 (RBAC without ``list``/``watch`` on the Lease): try again this much later.
FORBIDDEN_WAIT = 60.0
MAX_BACKOFF = 30.0

Deliver = Callable[[model.Record | None], None]


def event_record(
    event: dict[str, Any], to_record: Callable[[Any], model.Record]
) -> tuple[str, model.Record | None]:
    """A watch event as (type, record): ``None`` for a deleted Lease."""
    kind = str(event.get("type", ""))
    obj = event.get("object")
    if kind == "DELETED" or obj is None:
        return kind, None
    return kind, to_record(obj)


def watch_lease(
    api: Callable[[], Any],
    namespace: str,
    name: str,
    deliver: Deliver,
    stop: threading.Event,
    retry: float,
    log: logging.Logger,
    to_record: Callable[[Any], model.Record],
) -> None:
    """Watch until ``stop`` is set (see the module docstring). ``api``: the current
    ``CoordinationV1Api`` (asked again at every (re)start: the credentials may change)."""
    from kubernetes import watch
    from kubernetes.client import ApiException

    make: Any = watch.Watch  # the client's module has no type hints
    version: str | None = None
    failures = 0
    while not stop.is_set():
        w = make()
        kwargs: dict[str, Any] = {
            "field_selector": f"metadata.name={name}",
            "timeout_seconds": STREAM_SECONDS,
            "_request_timeout": (max(1.0, retry), STREAM_SECONDS + READ_MARGIN),
        }
        if version is not None:
            kwargs["resource_version"] = version
        try:
            for event in w.stream(api().list_namespaced_lease, namespace, **kwargs):
                if stop.is_set():
                    w.stop()
                    break
                kind, rec = event_record(event, to_record)
                if kind not in ("ADDED", "MODIFIED", "DELETED"):
                    continue
                version = w.resource_version
                failures = 0
                deliver(rec)
            else:
                version = w.resource_version or version
                continue  # the server ended the stream: resume from the last version
        except ApiException as exc:
            version = None  # 410 Gone (compacted), or refused: start from the current state
            failures += 1
            _quiet(log, failures, f"lease watch refused ({exc.status}): starting over")
            if exc.status in (401, 403):
                # RBAC without list/watch on the Lease: it will not change soon.
                stop.wait(FORBIDDEN_WAIT)
        except Exception as exc:  # a dead connection, a bad answer: start over
            version = None
            failures += 1
            _quiet(log, failures, f"lease watch ended ({type(exc).__name__}): starting over")
        # Failing again and again (a server that cannot watch): back off, up to a limit.
        stop.wait(min(retry * 2 ** max(0, failures - 1), MAX_BACKOFF))


def _quiet(log: logging.Logger, failures: int, text: str) -> None:
    # The watch is a shortcut, not a safety net: its failures go to the log once in a while.
    log.log(logging.WARNING if failures in (1, 10) or failures % 100 == 0 else logging.DEBUG, text)

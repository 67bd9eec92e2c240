"""Kubernetes Lease leader election, the decision core's vocabulary: what goes in and out.

What it is
    The data the Lease core (``vipd.lease.logic``) and its driver exchange, and nothing that
    decides: the timing parameters and client-go's rule on them (`validate_timing`,
    `Params`); the record read of a ``coordination.k8s.io/v1`` Lease (`Record`: the spec
    fields that matter and the ``resourceVersion``); the one call the core asks for
    (`Request`, with its `Verb` and `Purpose`); the answer as an outcome (`Ok`, `NotFound`,
    `Conflict`, `Unavailable`, `Unreachable`, `Rejected`, `StoreRefused`; `classify` maps an
    HTTP status and message to one, telling etcd's NOSPACE refusal from an API server's own
    trouble); the actions the core returns (`Send`, `BecomeLeader`, `BecomeFollower`, `Hold`,
    with the stable reason labels `REASON_LABELS`); the roles (`Role`) and a peer's state as
    evidence (`PeerState`).

What it must not do
    Decide, do I/O, read a clock or draw random numbers: these are plain values (frozen
    dataclasses and enums). The Lease object itself (the ``kubernetes`` client's
    ``V1Lease``) is never seen here: ``vipd.lease.codec`` turns it into a `Record`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "JITTER",
    "REASON_LABELS",
    "REQUEST_FRACTION",
    "TAKES",
    "Action",
    "BecomeFollower",
    "BecomeLeader",
    "Conflict",
    "Hold",
    "NotFound",
    "Ok",
    "Outcome",
    "Params",
    "PeerState",
    "Purpose",
    "Record",
    "Rejected",
    "Request",
    "Role",
    "Send",
    "StoreRefused",
    "Unavailable",
    "Unreachable",
    "Verb",
    "classify",
    "outcome_kind",
    "validate_timing",
]

# wait by up to this fraction, so the documented bounds (takeover within one retry period of a
# release) hold.
JITTER = 0.1
# Fallback request timeout cap, as a fraction of the renew deadline: at least two attempts fit
# in one renew deadline.
REQUEST_FRACTION = 0.5


def validate_timing(duration: float, renew_deadline: float, retry_period: float) -> str | None:
    """client-go's rule, as one message, or None: duration > renew_deadline > 1.2 × retry."""
    if not retry_period > 0:
        return f"retry_period must be positive (got {retry_period})"
    if not renew_deadline > 1.2 * retry_period:
        return (
            f"renew_deadline ({renew_deadline:g} s) must be greater than 1.2 × retry_period "
            f"({1.2 * retry_period:g} s)"
        )
    if not duration > renew_deadline:
        return (
            f"duration ({duration:g} s) must be greater than renew_deadline ({renew_deadline:g} s)"
        )
    return None


@dataclass(frozen=True, slots=True)
class Params:
    identity: str
    duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    keep_on_unreachable: bool = True
    # This node's own addresses (and any other name it may be listed under): a peer entry
    # equal to one of them, or to ``identity``, is this node and never counts as a peer.
    self_addresses: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        problem = validate_timing(self.duration, self.renew_deadline, self.retry_period)
        if problem:
            raise ValueError(problem)
        if not self.identity:
            raise ValueError("identity must not be empty")

    @property
    def duration_seconds(self) -> int:
        """``leaseDurationSeconds`` is an integer in the API; never round below 1."""
        return max(1, round(self.duration))


@dataclass(frozen=True, slots=True)
class Record:
    """What this node read of the Lease (spec fields that matter plus metadata)."""

    resource_version: str
    holder: str | None  # "" on the wire is None here
    duration_seconds: int | None
    transitions: int = 0
    acquire_time: str | None = None  # kept as the server wrote them: for logs only
    renew_time: str | None = None


# -- requests ---------------------------------------------------------------------------------


class Verb(enum.Enum):
    GET = "get"
    CREATE = "create"
    UPDATE = "update"


class Purpose(enum.Enum):
    READ = "read"
    CREATE = "create"
    ACQUIRE = "acquire"  # from nobody, from an expired holder, or our own record after restart
    RENEW = "renew"
    RELEASE = "release"
    YIELD = "yield"  # unhealthy, with a healthy peer: the release write, the process goes on


# The writes that take the Lease for this node.
TAKES = (Purpose.CREATE, Purpose.ACQUIRE)


@dataclass(frozen=True, slots=True)
class Request:
    """One call for the driver. For writes, the spec to write; the driver stamps the times.

    ``stamp_acquire``: write ``acquireTime = now`` (a new holder); otherwise keep the one read.
    ``timeout``: seconds the driver may wait for the answer before it abandons the request.
    """

    id: int
    verb: Verb
    purpose: Purpose
    timeout: float
    resource_version: str | None = None
    holder: str | None = None
    duration_seconds: int | None = None
    transitions: int = 0
    stamp_acquire: bool = False
    acquire_time: str | None = None

    def __post_init__(self) -> None:
        if self.verb is Verb.UPDATE and not self.resource_version:
            # The Lease strategy answers 422 to an update without one; and without one an
            # update would overwrite whatever another node wrote since our read.
            raise ValueError(f"an update ({self.purpose.value}) needs the resourceVersion read")


# -- outcomes ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ok:
    record: Record


@dataclass(frozen=True, slots=True)
class NotFound:
    pass


@dataclass(frozen=True, slots=True)
class Conflict:
    """409: a stale resourceVersion on update, or AlreadyExists on create."""


@dataclass(frozen=True, slots=True)
class Unavailable:
    """The API server answered that it cannot serve now: HTTP 5xx or 429."""

    status: int
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Unreachable:
    """No answer: timeout, refused or reset connection, TLS failure, or abandoned."""

    detail: str = ""


@dataclass(frozen=True, slots=True)
class Rejected:
    """The API server refused the request: 401, 403, 422 or another 4xx."""

    status: int
    detail: str = ""


@dataclass(frozen=True, slots=True)
class StoreRefused:
    """The store refuses every write for every member alike: etcd's NOSPACE alarm."""

    status: int
    detail: str = ""


Outcome = Ok | NotFound | Conflict | Unavailable | Unreachable | Rejected | StoreRefused

# etcd's NOSPACE alarm as the API server passes it on in a 500: the quota check's error
# (``rpctypes.ErrGRPCNoSpace``, server/etcdserver/api/v3rpc/quota.go) and, once the alarm is
# raised through raft, the capped applier's (``errors.ErrNoSpace``). A 429 never is.
NOSPACE_MESSAGES = ("mvcc: database space exceeded", "etcdserver: no space")


def classify(status: int, message: str = "") -> Outcome:
    """The outcome of an HTTP error answer (``status`` 0: no answer at all)."""
    if status == 0:
        return Unreachable(message)
    if status == 404:
        return NotFound()
    if status == 409:
        return Conflict()
    if status == 429:
        # This API server's own Priority and Fairness: says nothing about the store.
        return Unavailable(status, message)
    if status >= 500:
        if any(m in message for m in NOSPACE_MESSAGES):
            return StoreRefused(status, message)
        return Unavailable(status, message)
    return Rejected(status, message)


def outcome_kind(outcome: Outcome) -> str:
    """A short stable label (for logs and metrics)."""
    if isinstance(outcome, StoreRefused):
        return "store-refused"
    if isinstance(outcome, Unavailable | Rejected):
        return f"http-{outcome.status}"
    return {
        Ok: "ok",
        NotFound: "not-found",
        Conflict: "conflict",
        Unreachable: "unreachable",
    }[type(outcome)]


# -- actions ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    request: Request


# The stable short labels of role changes (``vipd_role_transitions_total{reason=...}``): one
# per kind of cause, never the free text, which names holders and numbers. "other" is for a
# driver-side change the core did not cause.
REASON_LABELS: tuple[str, ...] = (
    "created",  # leader: created the missing Lease
    "acquired",  # leader: took a free or expired Lease, or our own after a restart
    "store-back",  # leader again: a holding leader renewed when the store came back
    "renewed",  # leader: a renewal write made us leader (a restart that renewed our record)
    "released",  # follower: our release write was answered (or could not be)
    "renew-deadline",  # follower: no renewal succeeded within the renew deadline
    "lost",  # follower: a read shows another holder
    "deleted",  # follower: our Lease was deleted
    "unhealthy",  # follower: local API server unhealthy (gave way, or stopped holding)
    "store-down-ended",  # follower: holding through a store outage ended by another failure
    "store-down",  # holding: past the renew deadline, kept by the unreachable-store rule
    "foreign-claim",  # follower: another node announced the VIP on the wire
    "other",
)


def _check_label(label: str) -> None:
    if label not in REASON_LABELS:
        raise ValueError(f"unknown reason label {label!r}")


@dataclass(frozen=True, slots=True)
class BecomeLeader:
    """The VIP belongs here. ``label``: one of `REASON_LABELS`; ``reason``: the detail."""

    reason: str
    label: str

    def __post_init__(self) -> None:
        _check_label(self.label)


@dataclass(frozen=True, slots=True)
class BecomeFollower:
    """The VIP leaves. ``label``: one of `REASON_LABELS`; ``reason``: the detail."""

    reason: str
    label: str

    def __post_init__(self) -> None:
        _check_label(self.label)


@dataclass(frozen=True, slots=True)
class Hold:
    """The renew deadline passed but the unreachable-store rule keeps the VIP here."""

    reason: str
    label: str = "store-down"

    def __post_init__(self) -> None:
        _check_label(self.label)


Action = Send | BecomeLeader | BecomeFollower | Hold


class PeerState(enum.Enum):
    """What this node's checker last got from one peer's API server ``/readyz``."""

    READY = "ready"
    NOT_READY = "not-ready"
    UNREACHABLE = "unreachable"


class Role(enum.Enum):
    FOLLOWER = "follower"
    LEADER = "leader"
    HOLDING = "holding"  # leader past its renew deadline, kept by the unreachable-store rule

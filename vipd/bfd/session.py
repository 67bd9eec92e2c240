"""One BFD session's state machine (RFC 5880, asynchronous mode), as pure data in and out.

What it is: the state variables of RFC 5880 §6.8.1 and the procedures that change them, for
one single-hop session (RFC 5881) in the Active role. A :class:`Session` is fed a decoded
packet (:meth:`Session.receive`), the expiry of its timers (:meth:`Session.on_timer`) and
commands (:meth:`Session.set_timers`, :meth:`Session.admin_down`, :meth:`Session.admin_up`);
each call returns the actions (:class:`Send`, :class:`StateChange`) for the shell to perform
in order, and leaves :attr:`Session.deadline` at the time the shell must call
:meth:`Session.on_timer` next.

What it must not do: any I/O, clock or randomness. Time comes in as ``now`` (float seconds of
a monotonic clock); the transmit jitter comes from the ``jitter`` callable the shell passes
(a fraction in [0, 1)), so a test can pin it.

The rules, with where they come from:

- States AdminDown/Down/Init/Up and the three-way handshake (§6.2, §6.8.6): Down + received
  Down → Init; Down + received Init → Up; Init + received Init or Up → Up; Up + received Down
  → Down (diag 3, Neighbor Signaled Session Down); received AdminDown in any state but Down →
  Down (diag 3). A session in AdminDown discards what it receives.
- Reception (§6.8.6): the packet-only checks are :func:`vipd.bfd.packet.decode`'s; here a
  non-zero Your Discriminator must be ours; then bfd.RemoteDiscr, RemoteSessionState,
  RemoteDemandMode and RemoteMinRxInterval are taken from the packet; a Final ends our Poll
  Sequence; a Poll is answered at once with a Final (§6.8.7); and the packet restarts the
  detection timer.
- Detection time (§6.8.4, asynchronous mode): the remote Detect Mult × max(our
  bfd.RequiredMinRxInterval, the remote's last Desired Min TX Interval). Expiry in Init or Up
  → Down with diag 1 (Control Detection Time Expired); in any state it clears
  bfd.RemoteDiscr (§6.8.1).
- Transmit interval (§6.8.2, §6.8.7): max(bfd.DesiredMinTxInterval, bfd.RemoteMinRxInterval),
  less a random 0-25 % (75-100 % of it; 75-90 % when bfd.DetectMult is 1). No periodic
  packets while bfd.RemoteMinRxInterval is zero, or while the remote is in Demand mode and
  both ends are Up (§6.8.7). vipd itself never asks for Demand mode and never runs Echo.
- Slow start (§6.8.3): while not Up, bfd.DesiredMinTxInterval is at least one second; the
  configured value applies once Up.
- Poll Sequence (§6.5, §6.8.3): a change of bfd.DesiredMinTxInterval or
  bfd.RequiredMinRxInterval while Up (reaching Up included) sends Poll until a Final comes.
  Until then an increased transmit interval is not used (the old, shorter one is) and a
  reduced receive interval does not shorten our detection time. One Poll Sequence at a time:
  a change during one is polled for once it ends.
- A state change is sent at once rather than at the next periodic packet, so the remote
  learns it within one one-way delay (FRR's bfdd does the same).
- Administrative control (§6.8.16): AdminDown with diag 7 (Administratively Down), and Control
  packets keep going at the slow rate, so the remote learns it and keeps its state; enabling
  again goes to Down.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vipd.bfd.packet import BadPacket, ControlPacket, Diag, State

__all__ = [
    "SLOW_TX_US",
    "Action",
    "Send",
    "Session",
    "StateChange",
    "Timers",
    "tx_interval_us",
]

SLOW_TX_US = 1_000_000  # RFC 5880 §6.8.3: at least one second while not Up
_US = 1_000_000.0


@dataclass(frozen=True, slots=True)
class Timers:
    """What the local system asks for (§6.8.1 bfd.DesiredMinTxInterval,
    bfd.RequiredMinRxInterval, bfd.DetectMult), in microseconds."""

    desired_min_tx_us: int
    required_min_rx_us: int
    detect_mult: int

    def __post_init__(self) -> None:
        if not 1 <= self.desired_min_tx_us <= 0xFFFFFFFF:
            raise ValueError(f"desired_min_tx_us must be 1..2^32-1 (got {self.desired_min_tx_us})")
        if not 0 <= self.required_min_rx_us <= 0xFFFFFFFF:
            raise ValueError(
                f"required_min_rx_us must be 0..2^32-1 (got {self.required_min_rx_us})"
            )
        if not 1 <= self.detect_mult <= 255:
            raise ValueError(f"detect_mult must be 1..255 (got {self.detect_mult})")


@dataclass(frozen=True, slots=True)
class Send:
    """Transmit this packet now."""

    packet: ControlPacket


@dataclass(frozen=True, slots=True)
class StateChange:
    """bfd.SessionState changed from ``old`` to ``new``; ``diag`` is bfd.LocalDiag after it,
    ``remote_state`` and ``remote_diag`` what the remote last said (the remote's diag tells
    a client an AdminDown from a failure, RFC 5882 §3.2)."""

    old: State
    new: State
    diag: int
    remote_state: State
    remote_diag: int


Action = Send | StateChange


def tx_interval_us(desired_min_tx_us: int, remote_min_rx_us: int) -> int:
    """The interval before jitter (§6.8.2, §6.8.7)."""
    return max(desired_min_tx_us, remote_min_rx_us)


def jittered(interval_us: int, detect_mult: int, fraction: float) -> float:
    """``interval_us`` in seconds, less 0-25 % (0.75-1.0 ×), or 10-25 % (0.75-0.9 ×) when
    bfd.DetectMult is 1 (§6.8.7); ``fraction`` in [0, 1) picks the point in the range."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"jitter fraction must be in [0, 1) (got {fraction})")
    top = 0.9 if detect_mult == 1 else 1.0
    return interval_us / _US * (top - (top - 0.75) * fraction)


class Session:
    """The state variables of RFC 5880 §6.8.1 for one session, and its procedures."""

    def __init__(
        self,
        local_discr: int,
        timers: Timers,
        now: float,
        jitter: Callable[[], float],
    ) -> None:
        if not 1 <= local_discr <= 0xFFFFFFFF:
            raise ValueError(f"local_discr must be 1..2^32-1 (got {local_discr})")
        self.local_discr = local_discr
        self.timers = timers
        self._jitter = jitter
        self.state = State.DOWN
        self.local_diag: int = Diag.NONE
        self.remote_discr = 0
        self.remote_state = State.DOWN
        self.remote_diag: int = Diag.NONE
        self.remote_demand = False
        self.remote_min_rx_us = 1  # §6.8.1: initialised to 1
        self.remote_detect_mult = 0  # none heard yet
        self.remote_desired_min_tx_us = 0
        # What we advertise (§6.8.1), and what is in force while a Poll Sequence runs.
        self.desired_min_tx_us = max(timers.desired_min_tx_us, SLOW_TX_US)
        self.required_min_rx_us = timers.required_min_rx_us
        self._tx_in_force_us = self.desired_min_tx_us
        self._rx_in_force_us = self.required_min_rx_us
        self._poll: tuple[int, int] | None = None  # the values the running Poll announced
        self.next_tx: float | None = now  # the Active role speaks first (§6.1)
        self.detect_at: float | None = None

    # -- what the shell reads --------------------------------------------------------------

    @property
    def deadline(self) -> float | None:
        """When :meth:`on_timer` is next due (None: nothing is armed)."""
        due = [t for t in (self.next_tx, self.detect_at) if t is not None]
        return min(due) if due else None

    @property
    def polling(self) -> bool:
        return self._poll is not None

    @property
    def up(self) -> bool:
        return self.state is State.UP

    def detection_time(self) -> float:
        """§6.8.4, asynchronous mode, in seconds (0 until the remote has been heard)."""
        agreed = max(self._rx_in_force_us, self.remote_desired_min_tx_us)
        return self.remote_detect_mult * agreed / _US

    def transmit_interval(self) -> int:
        """The interval before jitter, in microseconds (§6.8.7)."""
        return tx_interval_us(self._tx_in_force_us, self.remote_min_rx_us)

    # -- inputs ----------------------------------------------------------------------------

    def receive(self, packet: ControlPacket, now: float) -> list[Action]:
        """A packet that :func:`vipd.bfd.packet.decode` accepted and the shell demultiplexed
        to this session (§6.8.6). Raises :class:`BadPacket` if it is not ours."""
        if packet.your_discr not in (0, self.local_discr):
            raise BadPacket(
                "your_discr", f"Your Discriminator {packet.your_discr} is not {self.local_discr}"
            )
        self.remote_discr = packet.my_discr
        self.remote_state = packet.state
        self.remote_diag = packet.diag
        self.remote_demand = packet.demand
        self.remote_min_rx_us = packet.required_min_rx_us
        self.remote_detect_mult = packet.detect_mult
        self.remote_desired_min_tx_us = packet.desired_min_tx_us
        actions: list[Action] = []
        if packet.final and self._poll is not None:
            self._end_poll()
        if self.state is State.ADMIN_DOWN:
            self._reschedule(now)
            return actions
        if packet.state is State.ADMIN_DOWN:
            if self.state is not State.DOWN:
                actions += self._set_state(State.DOWN, Diag.NEIGHBOR_SIGNALED_SESSION_DOWN, now)
        elif self.state is State.DOWN:
            if packet.state is State.DOWN:
                actions += self._set_state(State.INIT, self.local_diag, now)
            elif packet.state is State.INIT:
                actions += self._set_state(State.UP, self.local_diag, now)
        elif self.state is State.INIT:
            if packet.state in (State.INIT, State.UP):
                actions += self._set_state(State.UP, self.local_diag, now)
        elif packet.state is State.DOWN:  # we are Up
            actions += self._set_state(State.DOWN, Diag.NEIGHBOR_SIGNALED_SESSION_DOWN, now)
        if packet.poll:
            # §6.8.7: a Final "as soon as practicable, without respect to the transmission
            # timer"; a state change above has just sent our news, but without the F bit.
            actions.append(self._send(now, final=True))
        self.detect_at = now + self.detection_time()
        self._reschedule(now)
        return actions

    def on_timer(self, now: float) -> list[Action]:
        """Whatever is due at ``now``: the detection timer (§6.8.4), a periodic packet."""
        actions: list[Action] = []
        if self.detect_at is not None and now >= self.detect_at:
            self.detect_at = None
            self.remote_discr = 0  # §6.8.1: reset when a Detection Time passes in silence
            if self.state in (State.INIT, State.UP):
                actions += self._set_state(State.DOWN, Diag.CONTROL_DETECTION_TIME_EXPIRED, now)
        if self.next_tx is not None and now >= self.next_tx:
            actions.append(self._send(now))
        self._reschedule(now)
        return actions

    def set_timers(self, timers: Timers, now: float) -> list[Action]:
        """New configured intervals (§6.8.3): in force at once while not Up, through a Poll
        Sequence while Up."""
        self.timers = timers
        return self._apply_timers(now)

    def admin_down(self, now: float, diag: int = Diag.ADMINISTRATIVELY_DOWN) -> list[Action]:
        """§6.8.16: disable the session."""
        if self.state is State.ADMIN_DOWN:
            return []
        return self._set_state(State.ADMIN_DOWN, diag, now)

    def admin_up(self, now: float) -> list[Action]:
        """§6.8.16: enable the session again (to Down)."""
        if self.state is not State.ADMIN_DOWN:
            return []
        return self._set_state(State.DOWN, Diag.NONE, now)

    # -- the procedures --------------------------------------------------------------------

    def _set_state(self, new: State, diag: int, now: float) -> list[Action]:
        old = self.state
        self.state = new
        self.local_diag = diag
        actions: list[Action] = [StateChange(old, new, diag, self.remote_state, self.remote_diag)]
        if old is State.UP and new is not State.UP:
            # A Poll Sequence is about the Up session's timers; what is advertised is in
            # force again at once.
            self._poll = None
            self._tx_in_force_us = self.desired_min_tx_us
            self._rx_in_force_us = self.required_min_rx_us
        if old is State.UP or new is State.UP:
            actions += self._apply_timers(now, announce=False)
        actions.append(self._send(now))
        return actions

    def _apply_timers(self, now: float, *, announce: bool = True) -> list[Action]:
        tx = self.timers.desired_min_tx_us
        if self.state is not State.UP:
            tx = max(tx, SLOW_TX_US)
        rx = self.timers.required_min_rx_us
        if (tx, rx) == (self.desired_min_tx_us, self.required_min_rx_us):
            return []
        self.desired_min_tx_us, self.required_min_rx_us = tx, rx
        if self.state is not State.UP:
            self._tx_in_force_us, self._rx_in_force_us = tx, rx
            self._reschedule(now)
            return []
        # While a Poll runs the shorter transmit interval and the longer receive interval
        # are in force: the remote may still be timing us on either old value.
        self._tx_in_force_us = min(self._tx_in_force_us, tx)
        self._rx_in_force_us = max(self._rx_in_force_us, rx)
        if self._poll is None:
            self._poll = (tx, rx)
            if announce:
                return [self._send(now)]
        return []

    def _end_poll(self) -> None:
        assert self._poll is not None
        self._tx_in_force_us, self._rx_in_force_us = self._poll
        self._poll = None
        current = (self.desired_min_tx_us, self.required_min_rx_us)
        if current != (self._tx_in_force_us, self._rx_in_force_us):
            self._tx_in_force_us = min(self._tx_in_force_us, current[0])
            self._rx_in_force_us = max(self._rx_in_force_us, current[1])
            self._poll = current

    def _periodic_allowed(self) -> bool:
        if self.remote_min_rx_us == 0:
            return False
        return not (self.remote_demand and self.up and self.remote_state is State.UP)

    def _reschedule(self, now: float) -> None:
        if not self._periodic_allowed():
            self.next_tx = None
        elif self.next_tx is None or self.next_tx > now + self.transmit_interval() / _US:
            # A shorter interval (reaching Up, a faster remote) takes effect now rather than
            # after the slow packet already scheduled; one that still fits is left alone, so
            # the jitter is drawn once per packet.
            self.next_tx = now + self._interval()

    def _interval(self) -> float:
        return jittered(self.transmit_interval(), self.timers.detect_mult, self._jitter())

    def _send(self, now: float, *, final: bool = False) -> Send:
        packet = ControlPacket(
            state=self.state,
            diag=self.local_diag,
            detect_mult=self.timers.detect_mult,
            my_discr=self.local_discr,
            your_discr=self.remote_discr,
            desired_min_tx_us=self.desired_min_tx_us,
            required_min_rx_us=self.required_min_rx_us,
            poll=self._poll is not None and not final,
            final=final,
        )
        self.next_tx = now + self._interval() if self._periodic_allowed() else None
        return Send(packet)

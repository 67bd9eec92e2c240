"""The BFD session state machine (RFC 5880 §6.2, §6.5, §6.8) on a fake clock."""

from __future__ import annotations

import pytest

from vipd.bfd.packet import BadPacket, ControlPacket, Diag, State
from vipd.bfd.session import SLOW_TX_US, Send, Session, StateChange, Timers, jittered

MS = 1000
FAST = Timers(desired_min_tx_us=100 * MS, required_min_rx_us=100 * MS, detect_mult=3)
LOCAL = 0xA1
REMOTE = 0xB2


def new(timers: Timers = FAST, jitter: float = 0.0) -> Session:
    return Session(LOCAL, timers, 0.0, lambda: jitter)


def peer(state: State, **kw: object) -> ControlPacket:
    base: dict[str, object] = {
        "state": state,
        "diag": Diag.NONE,
        "detect_mult": 3,
        "my_discr": REMOTE,
        "your_discr": 0 if state in (State.DOWN, State.ADMIN_DOWN) else LOCAL,
        "desired_min_tx_us": 100 * MS,
        "required_min_rx_us": 100 * MS,
    }
    base.update(kw)
    return ControlPacket(**base)  # type: ignore[arg-type]


def sends(actions: list[Send | StateChange]) -> list[ControlPacket]:
    return [a.packet for a in actions if isinstance(a, Send)]


def changes(actions: list[Send | StateChange]) -> list[tuple[State, State, int]]:
    return [(a.old, a.new, a.diag) for a in actions if isinstance(a, StateChange)]


def up(session: Session, now: float = 0.0) -> Session:
    session.receive(peer(State.DOWN), now)
    session.receive(peer(State.UP), now)
    assert session.state is State.UP
    return session


def final(session: Session, now: float) -> None:
    session.receive(peer(State.UP, final=True), now)


# -- §6.2 / §6.8.6: the states -------------------------------------------------------------


def test_a_new_session_is_down_and_speaks_first_slowly() -> None:
    s = new()
    assert s.state is State.DOWN and s.deadline == 0.0
    [p] = sends(s.on_timer(0.0))
    assert (p.state, p.your_discr, p.my_discr) == (State.DOWN, 0, LOCAL)
    # §6.8.3: not less than one second while not Up, whatever is configured
    assert p.desired_min_tx_us == SLOW_TX_US and p.required_min_rx_us == 100 * MS
    assert s.next_tx == pytest.approx(1.0)


def test_three_way_handshake_down_init_up() -> None:
    s = new()
    acts = s.receive(peer(State.DOWN), 0.0)
    assert changes(acts) == [(State.DOWN, State.INIT, Diag.NONE)]
    [p] = sends(acts)  # the change goes out at once
    assert p.state is State.INIT and p.your_discr == REMOTE
    acts = s.receive(peer(State.UP), 0.01)
    assert changes(acts) == [(State.INIT, State.UP, Diag.NONE)]


def test_down_with_remote_init_goes_straight_up() -> None:
    s = new()
    assert changes(s.receive(peer(State.INIT), 0.0)) == [(State.DOWN, State.UP, Diag.NONE)]


def test_down_with_remote_up_stays_down() -> None:
    s = new()
    assert changes(s.receive(peer(State.UP), 0.0)) == []
    assert s.state is State.DOWN


def test_init_with_remote_init_goes_up() -> None:
    s = new()
    s.receive(peer(State.DOWN), 0.0)
    assert changes(s.receive(peer(State.INIT), 0.0)) == [(State.INIT, State.UP, Diag.NONE)]


def test_init_with_remote_down_stays_init() -> None:
    s = new()
    s.receive(peer(State.DOWN), 0.0)
    assert changes(s.receive(peer(State.DOWN), 0.0)) == [] and s.state is State.INIT


def test_up_with_remote_down_goes_down_neighbor_signaled() -> None:
    s = up(new())
    acts = s.receive(peer(State.DOWN, diag=Diag.CONTROL_DETECTION_TIME_EXPIRED), 0.1)
    assert changes(acts) == [(State.UP, State.DOWN, Diag.NEIGHBOR_SIGNALED_SESSION_DOWN)]
    assert sends(acts)[0].diag == Diag.NEIGHBOR_SIGNALED_SESSION_DOWN


def test_remote_admin_down_takes_us_down_and_says_why() -> None:
    s = up(new())
    acts = s.receive(peer(State.ADMIN_DOWN, diag=Diag.ADMINISTRATIVELY_DOWN), 0.1)
    [change] = [a for a in acts if isinstance(a, StateChange)]
    assert (change.new, change.diag) == (State.DOWN, Diag.NEIGHBOR_SIGNALED_SESSION_DOWN)
    assert (change.remote_state, change.remote_diag) == (
        State.ADMIN_DOWN,
        Diag.ADMINISTRATIVELY_DOWN,
    )


def test_remote_admin_down_while_down_changes_nothing() -> None:
    s = new()
    assert s.receive(peer(State.ADMIN_DOWN), 0.0) == [] and s.state is State.DOWN


def test_init_with_remote_admin_down_goes_down() -> None:
    s = new()
    s.receive(peer(State.DOWN), 0.0)
    acts = s.receive(peer(State.ADMIN_DOWN), 0.0)
    assert changes(acts) == [(State.INIT, State.DOWN, Diag.NEIGHBOR_SIGNALED_SESSION_DOWN)]


def test_a_packet_for_another_discriminator_is_refused() -> None:
    s = up(new())
    with pytest.raises(BadPacket) as err:
        s.receive(peer(State.UP, your_discr=LOCAL + 1), 0.1)
    assert err.value.reason == "your_discr" and s.state is State.UP


def test_remote_discriminator_is_learnt() -> None:
    s = new()
    [p] = sends(s.receive(peer(State.DOWN, my_discr=0x77), 0.0))
    assert s.remote_discr == 0x77 and p.your_discr == 0x77


# -- §6.8.16: administrative control ------------------------------------------------------


def test_admin_down_is_sent_and_discards_what_comes() -> None:
    s = up(new())
    acts = s.admin_down(1.0)
    assert changes(acts) == [(State.UP, State.ADMIN_DOWN, Diag.ADMINISTRATIVELY_DOWN)]
    [p] = sends(acts)
    assert (p.state, p.diag) == (State.ADMIN_DOWN, Diag.ADMINISTRATIVELY_DOWN)
    assert p.desired_min_tx_us == SLOW_TX_US and not p.poll
    assert s.receive(peer(State.DOWN), 1.1) == [] and s.state is State.ADMIN_DOWN
    # and it keeps telling the remote, at the slow rate (§6.8.16 "MAY be transmitted
    # indefinitely")
    assert s.next_tx == pytest.approx(2.0)
    assert sends(s.on_timer(2.0))[0].state is State.ADMIN_DOWN
    assert changes(s.admin_up(3.0)) == [(State.ADMIN_DOWN, State.DOWN, Diag.NONE)]


def test_admin_down_does_not_run_the_detection_timer_into_a_change() -> None:
    s = up(new())
    s.admin_down(0.0)
    assert changes(s.on_timer(10.0)) == []


# -- §6.8.4: detection time ----------------------------------------------------------------


def test_detection_time_is_remote_mult_times_the_agreed_interval() -> None:
    # our multiplier (5) must not be used; the remote's (3) is; the agreed interval is the
    # larger of our RequiredMinRx (100 ms) and the remote's DesiredMinTx (250 ms)
    s = up(new(Timers(100 * MS, 100 * MS, 5)))
    final(s, 0.0)
    s.receive(peer(State.UP, desired_min_tx_us=250 * MS), 1.0)
    assert s.detection_time() == pytest.approx(0.75)
    assert changes(s.on_timer(1.7499)) == [] and s.state is State.UP
    acts = s.on_timer(1.75)
    assert changes(acts) == [(State.UP, State.DOWN, Diag.CONTROL_DETECTION_TIME_EXPIRED)]
    assert s.remote_discr == 0
    assert sends(acts)[0].your_discr == 0


def test_detection_uses_our_rx_when_it_is_the_larger() -> None:
    s = up(new(Timers(100 * MS, 400 * MS, 3)))
    final(s, 0.0)
    s.receive(peer(State.UP, desired_min_tx_us=100 * MS, detect_mult=2), 1.0)
    assert s.detection_time() == pytest.approx(0.8)
    assert s.detect_at == pytest.approx(1.8)


def test_every_valid_packet_restarts_detection() -> None:
    s = up(new())
    final(s, 0.0)
    for i in range(1, 20):
        s.receive(peer(State.UP), i * 0.25)
        assert changes(s.on_timer(i * 0.25 + 0.29)) == []
    assert s.state is State.UP


def test_detection_in_init_goes_down_too() -> None:
    s = new()
    s.receive(peer(State.DOWN), 0.0)
    assert changes(s.on_timer(3.0)) == [
        (State.INIT, State.DOWN, Diag.CONTROL_DETECTION_TIME_EXPIRED)
    ]


def test_detection_in_down_only_forgets_the_remote() -> None:
    s = new()
    s.receive(peer(State.UP), 0.0)  # stays Down, learns the discriminator
    assert s.remote_discr == REMOTE
    assert changes(s.on_timer(3.0)) == [] and s.remote_discr == 0


# -- §6.8.7 / §6.8.2: transmission ---------------------------------------------------------


def test_jitter_range() -> None:
    assert jittered(100 * MS, 3, 0.0) == pytest.approx(0.1)
    assert jittered(100 * MS, 3, 0.999999) == pytest.approx(0.075, abs=1e-6)
    assert jittered(100 * MS, 1, 0.0) == pytest.approx(0.09)  # 90 % at most with mult 1
    assert jittered(100 * MS, 1, 0.999999) == pytest.approx(0.075, abs=1e-6)
    with pytest.raises(ValueError):
        jittered(100 * MS, 3, 1.0)


def test_interval_is_the_larger_of_ours_and_the_remote_rx() -> None:
    s = up(new())
    final(s, 0.0)
    s.receive(peer(State.UP, required_min_rx_us=300 * MS), 1.0)
    assert s.transmit_interval() == 300 * MS
    s.on_timer(s.next_tx or 0.0)
    t = s.next_tx or 0.0
    sends(s.on_timer(t))
    assert (s.next_tx or 0.0) - t == pytest.approx(0.3)


def test_jitter_is_applied_to_every_periodic_packet() -> None:
    s = up(new(jitter=0.5))
    final(s, 0.0)
    t = s.next_tx or 0.0
    s.on_timer(t)
    assert (s.next_tx or 0.0) - t == pytest.approx(0.0875)


def test_no_periodic_packets_when_remote_rx_is_zero() -> None:
    s = up(new())
    s.receive(peer(State.UP, required_min_rx_us=0), 0.1)
    assert s.next_tx is None
    s.receive(peer(State.UP), 0.2)
    assert s.next_tx is not None


def test_no_periodic_packets_when_remote_demand_and_both_up() -> None:
    s = up(new())
    s.receive(peer(State.UP, demand=True), 0.1)
    assert s.next_tx is None
    s = new()
    s.receive(peer(State.DOWN, demand=True), 0.0)
    assert s.next_tx is not None  # not both Up


def test_reaching_up_speeds_up_the_slow_schedule() -> None:
    s = new()
    s.on_timer(0.0)
    assert s.next_tx == pytest.approx(1.0)
    up(s, 0.05)
    assert (s.next_tx or 9.0) <= 0.05 + 0.1 + 1e-9


# -- §6.5 / §6.8.3: Poll Sequence ----------------------------------------------------------


def test_reaching_up_polls_for_the_fast_interval_until_final() -> None:
    s = new()
    s.receive(peer(State.DOWN), 0.0)
    acts = s.receive(peer(State.UP), 0.0)
    [p] = sends(acts)
    assert p.state is State.UP and p.poll and p.desired_min_tx_us == 100 * MS
    assert s.polling
    assert sends(s.on_timer(s.next_tx or 0.0))[0].poll  # periodic packets keep polling
    s.receive(peer(State.UP, final=True), 0.5)
    assert not s.polling
    assert not sends(s.on_timer(s.next_tx or 0.0))[0].poll


def test_a_final_without_our_poll_is_ignored() -> None:
    s = up(new())
    final(s, 0.1)
    final(s, 0.2)
    assert not s.polling and s.state is State.UP


def test_a_poll_is_answered_at_once_with_final() -> None:
    s = up(new())
    final(s, 0.0)
    s.on_timer(s.next_tx or 0.0)
    acts = s.receive(peer(State.UP, poll=True), 0.12)
    [p] = sends(acts)
    assert p.final and not p.poll


def test_a_final_never_carries_our_poll() -> None:
    s = up(new())  # our poll is running
    [p] = sends(s.receive(peer(State.UP, poll=True), 0.1))
    assert p.final and not p.poll and s.polling


def test_raising_tx_keeps_the_old_interval_until_final() -> None:
    s = up(new())
    final(s, 0.0)
    acts = s.set_timers(Timers(500 * MS, 100 * MS, 3), 1.0)
    [p] = sends(acts)
    assert p.poll and p.desired_min_tx_us == 500 * MS
    assert s.transmit_interval() == 100 * MS
    final(s, 1.1)
    assert s.transmit_interval() == 500 * MS


def test_lowering_tx_applies_at_once() -> None:
    s = up(new(Timers(300 * MS, 100 * MS, 3)))
    final(s, 0.0)
    s.set_timers(FAST, 1.0)
    assert s.polling and s.transmit_interval() == 100 * MS


def test_lowering_rx_keeps_the_old_detection_until_final() -> None:
    s = up(new(Timers(100 * MS, 400 * MS, 3)))
    final(s, 0.0)
    s.set_timers(FAST, 1.0)
    s.receive(peer(State.UP), 1.0)
    assert s.detection_time() == pytest.approx(1.2)
    s.receive(peer(State.UP, final=True), 1.1)
    assert s.detection_time() == pytest.approx(0.3)


def test_a_change_during_a_poll_is_polled_for_after_it() -> None:
    s = up(new())
    final(s, 0.0)
    s.set_timers(Timers(200 * MS, 100 * MS, 3), 1.0)
    assert sends(s.set_timers(Timers(300 * MS, 100 * MS, 3), 1.01)) == []  # one at a time
    final(s, 1.1)  # the first poll announced 200 ms: in force now, and 300 ms is polled
    assert s.polling and s.transmit_interval() == 200 * MS
    assert sends(s.on_timer(s.next_tx or 0.0))[0].desired_min_tx_us == 300 * MS
    final(s, 1.2)
    assert not s.polling and s.transmit_interval() == 300 * MS


def test_timers_change_while_down_without_a_poll() -> None:
    s = new()
    assert s.set_timers(Timers(2_000 * MS, 50 * MS, 3), 0.0) == []
    assert not s.polling and s.desired_min_tx_us == 2_000 * MS
    assert s.required_min_rx_us == 50 * MS


def test_going_down_returns_to_the_slow_rate_and_drops_the_poll() -> None:
    s = up(new())
    assert s.polling
    acts = s.receive(peer(State.DOWN), 0.1)
    [p] = sends(acts)
    assert p.desired_min_tx_us == SLOW_TX_US and not p.poll and not s.polling
    assert s.transmit_interval() == SLOW_TX_US

"""vipd.bfd under random input, with hypothesis.

- The codec: any bytes either decode to a packet that encodes back to the same 24 bytes, or
  raise BadPacket with one of the documented reasons; nothing else escapes.
- The session: under any sequence of received packets (from a peer that may lie, reorder and
  go quiet) and timer calls, it never sends Poll and Final together, never schedules a
  periodic packet sooner than 75 % or later than 100 % of the interval in force, never
  reports a change from a state to itself, and is Up only after hearing the peer in Init or
  Up (RFC 5880 §6.2: the three-way handshake).
"""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from vipd.bfd.packet import (
    BAD_PACKET_REASONS,
    HEADER_LEN,
    BadPacket,
    ControlPacket,
    State,
    decode,
    encode,
)
from vipd.bfd.session import Send, Session, StateChange, Timers

LOCAL = 0x1234


@given(st.binary(min_size=0, max_size=40))
def test_any_bytes_decode_or_are_refused_with_a_reason(data: bytes) -> None:
    try:
        packet = decode(data)
    except BadPacket as err:
        assert err.reason in BAD_PACKET_REASONS
        return
    assert encode(packet)[2:] == data[2:HEADER_LEN]  # bytes 0-1 carry the version and flags
    assert decode(encode(packet)) == packet


packets = st.builds(
    ControlPacket,
    state=st.sampled_from(State),
    diag=st.integers(0, 31),
    detect_mult=st.integers(1, 255),
    my_discr=st.integers(1, 0xFFFF),
    your_discr=st.sampled_from([0, LOCAL]),
    desired_min_tx_us=st.sampled_from([0, 1, 50_000, 100_000, 1_000_000]),
    required_min_rx_us=st.sampled_from([0, 1, 50_000, 100_000, 1_000_000]),
    poll=st.booleans(),
    demand=st.booleans(),
).filter(lambda p: p.your_discr != 0 or p.state in (State.DOWN, State.ADMIN_DOWN))

steps = st.lists(
    st.one_of(
        st.tuples(st.just("rx"), st.floats(0.0, 0.5), packets, st.booleans()),
        st.tuples(st.just("timer"), st.floats(0.0, 2.0), st.none(), st.booleans()),
        st.tuples(st.just("timers"), st.floats(0.0, 0.5), st.none(), st.booleans()),
        st.tuples(st.just("admin"), st.floats(0.0, 0.5), st.none(), st.booleans()),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(steps, st.floats(0.0, 0.999))
def test_session_invariants(script: list[tuple[str, float, object, bool]], u: float) -> None:
    s = Session(LOCAL, Timers(100_000, 100_000, 3), 0.0, lambda: u)
    now = 0.0
    heard_init_or_up = False
    for kind, dt, packet, flag in script:
        now += dt
        if kind == "rx":
            assert isinstance(packet, ControlPacket)
            if flag:
                packet = dataclasses.replace(packet, final=True, poll=False)
            actions = s.receive(packet, now)
            if packet.state in (State.INIT, State.UP):
                heard_init_or_up = True
        elif kind == "timer":
            if s.deadline is not None:
                now = max(now, s.deadline)
            actions = s.on_timer(now)
        elif kind == "timers":
            tx = 300_000 if flag else 100_000
            actions = s.set_timers(Timers(tx, 100_000 if flag else 300_000, 3), now)
        else:
            actions = s.admin_down(now) if flag else s.admin_up(now)
        for action in actions:
            if isinstance(action, Send):
                assert not (action.packet.poll and action.packet.final)
                assert action.packet.my_discr == LOCAL
            elif isinstance(action, StateChange):
                assert action.old is not action.new
                if action.new is State.UP:
                    assert heard_init_or_up
        if s.next_tx is not None and any(isinstance(a, Send) for a in actions):
            interval = s.transmit_interval() / 1e6
            gap = s.next_tx - now
            assert 0.75 * interval - 1e-9 <= gap <= interval + 1e-9, (gap, interval)

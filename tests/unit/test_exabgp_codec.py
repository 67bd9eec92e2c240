"""ExaBGP's config file, commands and messages, and the supervisor's decisions
(vipd.routed.exabgp_codec): pure, no ExaBGP needed."""

from __future__ import annotations

import base64
from ipaddress import IPv4Address, IPv6Address, ip_network

import pytest

from vipd.routed import exabgp_codec as codec
from vipd.routed.speaker import Peer, SpeakerConfig

V4 = IPv4Address("10.78.1.0")
V6 = IPv6Address("fd00:78::")
CFG = SpeakerConfig(
    65100,
    IPv4Address("10.78.1.1"),
    9,
    (Peer(V4, 65000), Peer(V6, 65001, 1179, b'p"w;}\n')),
)
RELAY = ["/usr/bin/python3", "-m", "vipd.routed.exabgp_relay", "/run/vipd-bgp-x/api.sock"]

# A state message as ExaBGP 5.0.15's JSON encoder writes it
# (src/exabgp/reactor/api/response/json.py, ``up``/``down``).
STATE = (
    '{ "exabgp": "5.0.0", "time": 1764930000.1, "host" : "n1", "pid" : 42, "ppid" : 41, '
    '"counter": 3, "type": "state", "neighbor": { "address": { "local": "10.78.1.1", '
    '"peer": "10.78.1.0" }, "asn": { "local": 65100, "peer": 65000 } , "state": "%s"%s } }'
)


def test_the_config_has_one_neighbor_block_per_peer_and_the_api_process() -> None:
    text = codec.render_config(CFG, RELAY)
    assert f"run {' '.join(RELAY)};" in text
    assert "encoder json;" in text
    assert text.count("neighbor ") == 2
    assert "neighbor 10.78.1.0 {" in text and "neighbor fd00:78:: {" in text
    for line in ("local-as 65100;", "peer-as 65000;", "peer-as 65001;", "hold-time 9;"):
        assert line in text
    assert "router-id 10.78.1.1;" in text and "connect 1179;" in text
    assert "family { ipv4 unicast; }" in text and "family { ipv6 unicast; }" in text
    assert text.count("neighbor-changes;") == 2
    assert "passive false;" in text


def test_a_password_is_written_in_base64_only() -> None:
    text = codec.render_config(CFG, RELAY)
    encoded = base64.b64encode(b'p"w;}\n').decode()
    assert f'md5-password "{encoded}";' in text and "md5-base64 true;" in text
    assert 'p"w' not in text
    assert text.count("md5-password") == 1  # the peer without a password has none


@pytest.mark.parametrize("word", ["", "a b", "x;", "{", "'q'"])
def test_a_relay_argument_that_cannot_be_written_is_refused(word: str) -> None:
    with pytest.raises(ValueError, match="cannot be written"):
        codec.render_config(CFG, [*RELAY[:-1], word])


def test_commands() -> None:
    net = ip_network("10.79.0.100/32")
    assert (
        codec.announce(V4, net) == "neighbor 10.78.1.0 announce route 10.79.0.100/32 next-hop self"
    )
    assert codec.withdraw(V4, net) == "neighbor 10.78.1.0 withdraw route 10.79.0.100/32"
    six = ip_network("fd00:79::100/128")
    assert (
        codec.announce(V6, six)
        == "neighbor fd00:78:: announce route fd00:79::100/128 next-hop self"
    )
    assert codec.teardown(V4) == "neighbor 10.78.1.0 teardown 2"
    assert codec.PING.startswith("#")


def test_answers_and_state_messages_parse() -> None:
    assert codec.parse("done") == codec.Ack(True)
    assert codec.parse("error\n") == codec.Ack(False)
    assert codec.parse(STATE % ("up", "")) == codec.SessionEvent(V4, "up")
    down = codec.parse(STATE % ("down", ', "reason": "peer reset, message [closing connection]"'))
    assert down == codec.SessionEvent(V4, "down", "peer reset, message [closing connection]")
    assert codec.parse(STATE % ("connected", "")) == codec.SessionEvent(V4, "connected")


def test_other_messages_are_ignored_and_shutdown_is_seen() -> None:
    assert codec.parse('{"type": "update", "neighbor": {}}') == codec.Ignored("update")
    assert codec.parse(
        '{"exabgp": "5.0.0", "type": "notification", "notification": "shutdown"}'
    ) == (codec.Shutdown())


@pytest.mark.parametrize(
    "line",
    [
        "hello",
        "{not json",
        "[1, 2]",
        '{"type": "state"}',
        '{"type": "state", "neighbor": {"address": {"peer": "x"}, "state": "up"}}',
        '{"type": "state", "neighbor": {"address": {"peer": "10.0.0.1"}, "state": "weird"}}',
        '{"type": "state", "neighbor": {"state": "up"}}',
        "{" + "x" * (codec.MAX_LINE + 1),
    ],
)
def test_a_bad_line_is_refused(line: str) -> None:
    with pytest.raises(codec.BadLine):
        codec.parse(line)


def test_restart_backs_off_and_a_long_life_resets_it() -> None:
    failures = 0
    delays = []
    for _ in range(8):
        delay, failures = codec.restart_delay(failures, lived=1.0)
        delays.append(delay)
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert codec.restart_delay(failures, lived=60.0) == (0.5, 1)
    assert codec.restart_delay(failures, lived=59.9)[0] == 30.0


def test_a_child_is_stuck_when_its_oldest_command_waits_too_long() -> None:
    assert not codec.stuck(100.0, None, 10.0)
    assert not codec.stuck(100.0, 90.5, 10.0)
    assert codec.stuck(100.0, 90.0, 10.0)

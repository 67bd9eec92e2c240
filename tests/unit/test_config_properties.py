"""Property-based tests of the config loader (vipd.config), with hypothesis.

What they prove, for any input hypothesis can build:

- the loader's only failure is ``ConfigError``, whose text is one line (arbitrary YAML text,
  arbitrary nested data, arbitrary environment overrides): no TypeError/KeyError/… escapes;
- a valid config round-trips: what was written is what the Config holds (VRID, priority,
  interval in centiseconds, preempt, GARP numbers), and writing it as YAML text or as data
  gives the same Config;
- every out-of-range VRID, priority or interval is refused with an error naming exactly
  that key; an advert interval is accepted exactly when it is a whole number of
  centiseconds in 0.01–40.95;
- an environment override wins over the file and is held to the same rule, its error naming
  the variable.

Each property tries a fixed, derandomized set of examples (``tests/unit/budget.py``);
``VIPD_HYPOTHESIS_DEEP=1`` tries ten times as many, at random.
"""

from __future__ import annotations

import math
from typing import Any

import yaml
from hypothesis import HealthCheck, example, given
from hypothesis import strategies as st

from tests.unit.budget import budget
from vipd.config import ConfigError, load, parse, read_text

HOST = "cp-1"
VIP = "10.0.0.100"

# YAML-ish data: what yaml.safe_load can produce.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
)
KEYS = [
    "node",
    "vip",
    "interface",
    "election",
    "mode",
    "vrrp",
    "vrid",
    "priority",
    "advert_interval",
    "version",
    "preempt",
    "preempt_delay",
    "unicast_peers",
    "auth_pass",
    "garp",
    "repeat",
    "interval",
    "refresh",
    "delay",
    "log",
    "format",
    "level",
    "health",
    "ipvs",
    "metrics",
    "listen",
    "lease",
    "vmac",
]
keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=12))
data = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=5)),
    max_leaves=25,
)


def one_line_error(exc: ConfigError) -> str:
    text = str(exc)
    assert "\n" not in text and text.strip() == text and text, repr(text)
    return text


@budget(200, suppress_health_check=[HealthCheck.too_slow])
@given(data)
def test_any_data_is_a_config_or_one_config_error(value: Any) -> None:
    try:
        parse(value, {}, HOST)
    except ConfigError as exc:
        one_line_error(exc)


def mutations() -> st.SearchStrategy[dict[str, Any]]:
    """A valid config with one subtree replaced by arbitrary data."""
    return st.fixed_dictionaries(
        {
            "vip": st.one_of(st.just(VIP), scalars),
            "election": st.one_of(
                st.fixed_dictionaries(
                    {
                        "vrrp": st.one_of(
                            st.fixed_dictionaries(
                                {"vrid": st.one_of(st.just(51), scalars), "priority": scalars}
                            ),
                            data,
                        )
                    }
                ),
                data,
            ),
            "garp": st.one_of(st.just({}), data),
            "log": st.one_of(st.just({}), data),
        }
    )


@budget(200, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_near_valid_data_is_a_config_or_one_config_error(value: dict[str, Any]) -> None:
    try:
        parse(value, {}, HOST)
    except ConfigError as exc:
        one_line_error(exc)


@budget(150)
@given(st.text(max_size=200))
@example("vip: 10.0.0.100\nvip: 10.0.0.101\n")
@example("a: [\n")
@example("\t")
def test_any_yaml_text_is_a_config_or_one_config_error(text: str) -> None:
    try:
        parse(read_text(text, "/etc/vipd/vipd.yaml"), {}, HOST)
    except ConfigError as exc:
        one_line_error(exc)


env_keys = st.sampled_from(
    ["VIPD_VRID", "VIPD_PRIORITY", "VIPD_ADVERT_INTERVAL", "VIPD_VIP", "VIPD_NODE",
     "VIPD_INTERFACE", "VIPD_LOG_FORMAT", "VIPD_CONFIG", "OTHER"]
)  # fmt: skip


@budget(150)
@given(st.dictionaries(env_keys, st.text(max_size=20), max_size=4))
def test_any_environment_is_a_config_or_one_config_error(env: dict[str, str]) -> None:
    try:
        parse({"vip": VIP, "election": {"vrrp": {"vrid": 51}}}, env, HOST)
    except ConfigError as exc:
        one_line_error(exc)


valid = st.fixed_dictionaries(
    {
        "vrid": st.integers(1, 255),
        "priority": st.integers(1, 254),
        "interval_cs": st.integers(1, 4095),
        "preempt": st.booleans(),
        "repeat": st.integers(1, 100),
        "garp_interval_ms": st.integers(0, 1000),
    }
)


def render(v: dict[str, Any]) -> dict[str, Any]:
    return {
        "vip": VIP,
        "election": {
            "mode": "vrrp",
            "vrrp": {
                "vrid": v["vrid"],
                "priority": v["priority"],
                "advert_interval": v["interval_cs"] / 100,
                "preempt": v["preempt"],
            },
        },
        "garp": {"repeat": v["repeat"], "interval": v["garp_interval_ms"] / 1000},
    }


@budget(150)
@given(valid)
def test_a_valid_config_round_trips(v: dict[str, Any]) -> None:
    cfg = parse(render(v), {}, HOST)
    vr = cfg.election.vrrp
    assert (vr.vrid, vr.priority, vr.advert_interval_cs, vr.preempt) == (
        v["vrid"],
        v["priority"],
        v["interval_cs"],
        v["preempt"],
    )
    assert vr.advert_interval == v["interval_cs"] / 100
    assert cfg.garp.repeat == v["repeat"]
    assert math.isclose(cfg.garp.interval, v["garp_interval_ms"] / 1000)
    assert str(cfg.vip) == VIP and cfg.node == HOST
    # The same config written as YAML text parses to the same thing.
    again = parse(read_text(yaml.safe_dump(render(v)), "x.yaml"), {}, HOST)
    assert again == cfg


@given(st.integers().filter(lambda n: not 1 <= n <= 255))
def test_a_vrid_out_of_range_names_the_key(vrid: int) -> None:
    cfg = {"vip": VIP, "election": {"vrrp": {"vrid": vrid}}}
    try:
        parse(cfg, {}, HOST)
    except ConfigError as exc:
        assert one_line_error(exc).startswith("election.vrrp.vrid: "), str(exc)
    else:
        raise AssertionError(f"vrid {vrid} accepted")


@given(st.integers().filter(lambda n: not 1 <= n <= 254))
def test_a_priority_out_of_range_names_the_key(priority: int) -> None:
    cfg = {"vip": VIP, "election": {"vrrp": {"vrid": 51, "priority": priority}}}
    try:
        parse(cfg, {}, HOST)
    except ConfigError as exc:
        assert one_line_error(exc).startswith("election.vrrp.priority: "), str(exc)
    else:
        raise AssertionError(f"priority {priority} accepted")


@budget(250)
@given(st.floats(min_value=-1.0, max_value=50.0, allow_nan=False))
@example(0.01)
@example(40.95)
@example(40.96)
@example(0.015)
@example(0.1 + 0.2)  # 0.30000000000000004: a whole number of centiseconds in decimal
def test_an_advert_interval_is_accepted_exactly_when_it_is_whole_centiseconds(
    interval: float,
) -> None:
    cs = round(interval * 100)
    whole = math.isclose(interval * 100, cs, rel_tol=0, abs_tol=1e-6)
    expect_ok = whole and 1 <= cs <= 4095
    cfg = {"vip": VIP, "election": {"vrrp": {"vrid": 51, "advert_interval": interval}}}
    try:
        got = parse(cfg, {}, HOST)
    except ConfigError as exc:
        assert one_line_error(exc).startswith("election.vrrp.advert_interval: "), str(exc)
        assert not expect_ok, f"{interval!r} refused: {exc}"
    else:
        assert expect_ok, f"{interval!r} accepted as {got.election.vrrp.advert_interval_cs} cs"
        assert got.election.vrrp.advert_interval_cs == cs


@given(st.integers(1, 255), st.integers(1, 255))
def test_an_environment_vrid_wins_over_the_file(file_vrid: int, env_vrid: int) -> None:
    cfg = {"vip": VIP, "election": {"vrrp": {"vrid": file_vrid}}}
    got = parse(cfg, {"VIPD_VRID": str(env_vrid)}, HOST)
    assert got.election.vrrp.vrid == env_vrid


@given(st.text(min_size=1, max_size=10).filter(lambda s: not s.strip().isdigit()))
def test_a_bad_environment_vrid_names_the_variable(raw: str) -> None:
    cfg = {"vip": VIP, "election": {"vrrp": {"vrid": 51}}}
    try:
        got = parse(cfg, {"VIPD_VRID": raw}, HOST)
    except ConfigError as exc:
        assert "(from VIPD_VRID)" in one_line_error(exc), str(exc)
    else:
        # Only an empty-looking value counts as unset and leaves the file's value.
        assert got.election.vrrp.vrid == 51, (raw, got.election.vrrp.vrid)


def test_load_reads_a_file_like_parse_reads_its_text(tmp_path: Any) -> None:
    path = tmp_path / "vipd.yaml"
    text = yaml.safe_dump(render({"vrid": 7, "priority": 9, "interval_cs": 1, "preempt": True,
                                  "repeat": 3, "garp_interval_ms": 5}))  # fmt: skip
    path.write_text(text)
    assert load(str(path), {}, HOST) == parse(read_text(text, str(path)), {}, HOST)

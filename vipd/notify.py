"""Notify hooks, the pure part: which commands a change of state runs, with which arguments
and environment (keepalived's ``notify_master``/``notify_backup``/``notify_fault``/
``notify_stop`` and ``notify``, keepalived.conf(5)).

What it is
    `Hooks` remembers the last state it announced and turns each election `Transition` (and
    the end of the ordered stop) into the `Run` records of its commands: the state's own
    command first, then the one for every state (``notify.all``). A transition that keeps
    the state (the Lease backend's "holding through a store outage") runs nothing, as in
    keepalived, which notifies state changes only.

    States: ``leader`` (role leader), ``backup`` (follower), ``fault`` (init: out of the
    election, e.g. the interface is down) and ``stop`` (vipd stopped, the VIP released).
    Each command gets three arguments after its own, ``<vip> <state> <reason>`` (the reason
    is the core's stable label, e.g. ``master-down``), and the environment variables
    ``VIPD_VIP``, ``VIPD_STATE``, ``VIPD_REASON``, ``VIPD_DETAIL`` (the core's text),
    ``VIPD_PREVIOUS_STATE`` and ``VIPD_NODE``.

What it must not do: run anything or read a clock (``vipd.hooks`` runs the commands, off the
takeover path), or decide anything about the election.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from vipd.config import Notify
from vipd.election import FOLLOWER, INIT, LEADER, Transition

STATE_OF_ROLE: Mapping[str, str] = MappingProxyType(
    {LEADER: "leader", FOLLOWER: "backup", INIT: "fault"}
)
STOP = "stop"


@dataclass(frozen=True, slots=True)
class Run:
    """One command to run: ``hook`` names it (``leader`` … ``all``: the metric label)."""

    hook: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    state: str


class Hooks:
    def __init__(self, cfg: Notify, *, node: str, vip: str) -> None:
        self.cfg = cfg
        self.node = node
        self.vip = vip
        self.state: str | None = None  # the last state announced

    def on_transition(self, t: Transition) -> list[Run]:
        """The commands for ``t``, or none when it keeps the state."""
        return self._change(STATE_OF_ROLE[t.role], t.label, t.detail)

    def on_stop(self) -> list[Run]:
        """The ordered stop ended (the VIP released): the stop commands."""
        return self._change(STOP, "stopped", "vipd stopped")

    def _change(self, state: str, reason: str, detail: str) -> list[Run]:
        previous, self.state = self.state, state
        if state == previous:
            return []
        env = {
            "VIPD_VIP": self.vip,
            "VIPD_STATE": state,
            "VIPD_REASON": reason,
            "VIPD_DETAIL": detail,
            "VIPD_PREVIOUS_STATE": previous or "",
            "VIPD_NODE": self.node,
        }
        out = []
        for hook in (state, "all"):
            command = self.cfg.command(hook)
            if command:
                out.append(
                    Run(hook, (*command, self.vip, state, reason), MappingProxyType(env), state)
                )
        return out

"""The routed lab's report: per-round records to plain data, per-fault p50/max, the text form.

What it is: ``report(opts, bed, rounds)`` (the JSON document `vipd.lab.routed_lab` prints
with ``--json``) and ``render(report)`` (the table, the per-fault summary and the timeline).

What it must not do: any I/O or measuring; it only arranges what the session measured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vipd.lab.analysis import percentiles
from vipd.lab.routed import RoutedBed
from vipd.lab.routed_faults import DRAIN, FALL, INTERVAL, RISE

if TYPE_CHECKING:
    from vipd.lab.routed_lab import RoutedOptions, RoutedRound

__all__ = ["render", "report"]


def report(opts: RoutedOptions, bed: RoutedBed, rounds: list[RoutedRound]) -> dict[str, Any]:
    planned = len(opts.faults) * opts.rounds
    by_fault: dict[str, dict[str, Any]] = {}
    for fault in opts.faults:
        mine = [r for r in rounds if r.fault == fault]
        by_fault[fault] = {"rounds": len(mine), "ok": sum(r.ok for r in mine)}
        for key in (
            "effect_ms",
            "failed",
            "failing_ms",
            "full_outage_ms",
            "restore_failed",
            "restore_failing_ms",
            "back_ms",
        ):
            vals = [float(v) for r in mine if (v := getattr(r, key)) is not None]
            p = percentiles(vals)
            by_fault[fault][key] = None if p is None else {"p50": p.p50, "max": p.max, "n": p.n}
    return {
        "lab": {
            "prefix": bed.prefix,
            "workdir": str(bed.workdir),
            "announce": opts.announce,
            "nodes": opts.nodes,
            "vip": bed.vip,
            "faults": list(opts.faults),
            "rounds_per_fault": opts.rounds,
            "probe_interval": opts.probe_interval,
            "probe_timeout": opts.probe_timeout,
            "health": {"interval": INTERVAL, "rise": RISE, "fall": FALL},
            "drain": DRAIN,
            "bfd": "100 ms x 3",
        },
        "rounds": [r.to_dict() for r in rounds],
        "summary": {
            "ok": len(rounds) == planned and all(r.ok for r in rounds),
            "failed_rounds": [r.number for r in rounds if not r.ok],
            "rounds_not_run": planned - len(rounds),
            "by_fault": by_fault,
        },
    }


def _f(v: Any) -> str:
    return "-" if v is None else f"{v:.0f}" if isinstance(v, float) else str(v)


def render(rep: dict[str, Any]) -> str:
    head = ["round", "fault", "node", "expected", "FIB ms", "failed", "failing ms",
            "full outage ms", "restore failed", "back ms", "result"]  # fmt: skip
    rows = [head]
    for r in rep["rounds"]:
        rows.append(
            [str(r["number"]), r["fault"], r["node"], r["expected"], _f(r["effect_ms"]),
             f"{r['failed']}/{r['attempts']}", _f(r["failing_ms"]), _f(r["full_outage_ms"]),
             str(r["restore_failed"]), _f(r["back_ms"]), "ok" if r["ok"] else "FAILED"]
        )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    lines += ["", "per fault (p50 / max):"]
    for fault, s in rep["summary"]["by_fault"].items():
        parts = [f"{s['ok']}/{s['rounds']} ok"]
        for key, label in (
            ("effect_ms", "FIB"),
            ("failed", "failed connects"),
            ("failing_ms", "failing"),
            ("full_outage_ms", "full outage"),
            ("restore_failed", "failed on restore"),
        ):
            p = s[key]
            if p is not None:
                unit = "" if "failed" in key else " ms"
                parts.append(f"{label} {p['p50']:.0f} / {p['max']:.0f}{unit}")
        lines.append(f"  {fault:9} " + "; ".join(parts))
    lines += ["", "timeline (ms from the fault):"]
    for r in rep["rounds"]:
        lines.append(f"  round {r['number']} ({r['fault']} {r['node']}):")
        lines += [f"    {t:8.0f}  {what}" for t, what in r["timeline"]]
        if r["error"]:
            lines.append(f"    ERROR: {r['error']}")
    lab, s = rep["lab"], rep["summary"]
    lines += [
        "",
        f"vipd announce {lab['announce']}, {lab['nodes']} nodes, VIP {lab['vip']}, FRR router "
        f"(BFD {lab['bfd']}), health every {lab['health']['interval']} s fall "
        f"{lab['health']['fall']}, drain {lab['drain']} s; connect every "
        f"{lab['probe_interval'] * 1000:g} ms, timeout {lab['probe_timeout']} s",
    ]
    if s["failed_rounds"]:
        lines.append(f"FAILED rounds: {s['failed_rounds']}")
    if s["rounds_not_run"]:
        lines.append(f"rounds not run (stopped after a failure): {s['rounds_not_run']}")
    lines.append("result: " + ("ok" if s["ok"] else "FAILED"))
    return "\n".join(lines)

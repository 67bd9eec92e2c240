"""Converters from keepalived's and kube-vip's configuration to a vipd config
(``vipd import``): text in, (YAML text, dropped settings, errors) out.

What it is
    ``kaconf``      keepalived's config grammar (statements, blocks, comments, includes)
    ``keepalived``  a keepalived config tree → a vipd config
    ``kubevip``     a kube-vip static pod or DaemonSet manifest → a vipd config
    ``render``      the output: YAML with a comment on each key saying where it came from

    Every converter returns an `Imported`. What has no equivalent in vipd is a `Dropped` (the
    setting, where it was, why); what the importer cannot decide without guessing (two
    virtual routers for one address family, a value vipd would refuse) is an error, and then
    there is no config at all. A config that is returned has been through vipd's own loader
    (`vipd.config.parse`).

What it must not do: read files, the environment or the host. keepalived's includes are read
through the `kaconf.Files` the caller passes.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EXIT_IMPORT_DROPPED", "EXIT_IMPORT_ERROR", "Dropped", "Imported"]

EXIT_IMPORT_DROPPED = 4  # vipd import: a config was printed, but settings were dropped
EXIT_IMPORT_ERROR = 2  # vipd import: nothing printed (unreadable, ambiguous, refused)


@dataclass(frozen=True)
class Dropped:
    """A setting with no vipd equivalent: what, where (``file:line`` or the env name), why."""

    what: str
    where: str
    why: str

    def line(self) -> str:
        return f"dropped: {self.what} ({self.where}): {self.why}"


@dataclass(frozen=True)
class Imported:
    """The result of one import: with ``errors``, ``yaml`` and ``dropped`` are empty."""

    yaml: str
    dropped: tuple[Dropped, ...]
    errors: tuple[str, ...]

    @property
    def exit_code(self) -> int:
        if self.errors:
            return EXIT_IMPORT_ERROR
        return EXIT_IMPORT_DROPPED if self.dropped else 0

"""``python -m vipd.lab`` (and ``vipd lab``, which runs this module): the lab runner.

It only parses arguments with ``vipd.lab.runner.add_arguments`` and calls ``runner.run``;
it must not grow options or logic of its own.
"""

from __future__ import annotations

import argparse
import sys

from vipd.lab import runner


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vipd lab",
        description="Run VRRP daemons on network-namespace nodes, inject faults, and measure "
        "the outage a client sees.",
    )
    runner.add_arguments(parser)
    return runner.run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

"""Entry point for ``python -m vipd``."""

import sys

from vipd.cli import main

sys.exit(main())

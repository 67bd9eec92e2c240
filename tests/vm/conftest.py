"""tests/vm: the guest-side tests (tests/vm/guest) only run inside the qemu guest that
tests/vm/test_vm.py boots (it sets VIPD_VM_GUEST=1); on the host they are not collected at
all, so they are neither run against a kernel without IPVS nor reported as skips."""

from __future__ import annotations

import os

collect_ignore_glob = [] if os.environ.get("VIPD_VM_GUEST") == "1" else ["guest/*"]

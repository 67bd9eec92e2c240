"""Peer lists that follow the control plane (``*_from`` keys, the ``membership`` section).

``policy``: the pure part (what the API's objects say, the merge with the static list, the
VRRP admission rule, the config with the followed lists in). ``reader``: the thin reader of
the API server. ``follower``: the agent's task that reads, merges and applies.
"""

"""Routed fabrics: announcing the VIP through the node's own BGP speaker (routing-table mode).

`plan` (pure: phases and the route plan), `ecmp` (pure: the announce-or-not pool rule) and
`actuator` (the kernel routes, through pyroute2). Not wired into the agent yet: see
docs/design/routed.md.
"""

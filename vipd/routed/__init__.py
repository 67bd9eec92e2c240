"""Routed fabrics: announcing the VIP through the node's own BGP speaker (routing-table mode).

`plan` (pure: phases and the route plan), `ecmp` (pure: the announce-or-not pool rule),
`core` (pure: the rule and the drain together), `actuator` (the kernel routes, through
pyroute2), `backend` (the ECMP pool behind the election port) and `leader` (``pool: leader``:
the controller's actuators, the election's holder announcing). See docs/design/routed.md.
"""

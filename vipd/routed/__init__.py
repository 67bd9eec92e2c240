"""Routed fabrics: announcing the VIP with BGP, through the node's own routing daemon
(routing-table mode) or vipd's embedded speaker (bgp mode).

`plan` (pure: phases and the route plan), `ecmp` (pure: the announce-or-not pool rule),
`core` (pure: both over time), `actuator` (the kernel routes, through pyroute2), `backend`
(the agent's backend for the ECMP pool of both modes), `leader` (routing-table's ``pool:
leader``: the controller's actuators, the election's holder announcing); bgp mode adds
`speaker` (the speaker port), `exabgp_codec` (pure), `exabgp` and `exabgp_relay` (ExaBGP as
a child process) and `bgp` (bindings plus speaker behind the backend's `Routes` port). See
docs/design/routed.md.
"""

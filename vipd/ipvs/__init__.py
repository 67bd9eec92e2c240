"""IPVS load balancing of the API server behind the VIP: the pure pool rules and plan
(`vipd.ipvs.plan`) and the reconciler that drives the actuator on the leader
(`vipd.ipvs.reconciler`). The netlink side is `vipd.ipvs.actuator`."""

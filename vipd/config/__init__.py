"""vipd's configuration: one YAML file plus a few environment overrides, validated into
frozen dataclasses whose fields declare every key, its default and its rules once.

What this module does
    ``load(path)`` reads the file, ``parse(data)`` validates an already-loaded mapping. Both
    return a `Config` or raise `ConfigError`, whose ``str()`` is one line naming the dotted key,
    the rule and the offending value::

        election.vrrp.vrid: must be an integer from 1 to 255 (got 300)

    Every value is checked before anything is returned: there is no half-applied config.
    Unknown keys are errors at every level (a typo must not silently become a default), and so
    are the keys of features this version does not have yet (``schema.NOT_IMPLEMENTED``).

Where things are (this package re-exports the public names; import them from here)
    ``schema``     how a key is declared (``field(default=..., metadata=spec(rule))``) and the
                   reader that validates a section against its declaration
    ``error``      `ConfigError`
    ``rules``      value rules several sections share (IP literals, node lists, commands)
    ``kubeapi``    ``election.lease``, ``ipvs.discovery`` and their shared API access
    ``membership`` ``membership`` and the ``*_from`` keys (peer lists that follow the cluster)
    ``election``   ``election`` and ``election.vrrp``
    ``announce``   ``announce`` (ARP, or routing-table mode's routes)
    ``sections``   ``garp``, ``log``, ``health``, ``ipvs``, ``notify``, ``track``, ``metrics``
    ``document``   `Config` and the top-level keys
    ``source``     the YAML file, the environment overrides, `parse` and `errors`

What it must not do
    It is part of the pure core (``docs/design/architecture.md``): no asyncio, socket,
    pyroute2, time or subprocess. It does not look at the host: it does not read
    ``os.environ`` or the hostname by itself (the caller passes ``env`` and ``hostname``),
    and whether the interface exists or the VIP is already a node address is
    ``vipd.preflight``'s job. Reading the file in `load` is its one I/O.

Environment overrides (for manifests; applied before validation, so they obey the same rules;
an error caused by one names the variable; an empty variable counts as unset; each declared
with its key, ``spec(env=...)``)

    =====================  ======================================  ==========
    variable               key                                     parsed as
    =====================  ======================================  ==========
    VIPD_VIP               vip                                     string
    VIPD_INTERFACE         interface                               string
    VIPD_NODE              node                                    string
    VIPD_VRID              election.vrrp.vrid                      integer
    VIPD_PRIORITY          election.vrrp.priority                  integer
    VIPD_ADVERT_INTERVAL   election.vrrp.advert_interval           number
    VIPD_LOG_FORMAT        log.format                              string
    =====================  ======================================  ==========

    ``node`` is resolved as: VIPD_NODE, else ``node`` in the file, else NODE_NAME (what a pod
    gets from the downward API), else the ``hostname`` the caller passed.

Rules and where they come from: in the docstring of the module that declares the key.
"""

from __future__ import annotations

from vipd.config.announce import Announce
from vipd.config.auth_hmac import AuthHmac
from vipd.config.document import Config
from vipd.config.election import Election, Vrrp
from vipd.config.error import ConfigError
from vipd.config.kubeapi import IpvsDiscovery, KubeAccess, Lease
from vipd.config.membership import SOURCES as MEMBERSHIP_SOURCES
from vipd.config.membership import Membership
from vipd.config.rules import Command, IPAddress
from vipd.config.sections import (
    DEFAULT_METRICS_LISTEN,
    IPVS_SCHEDULERS,
    NOTIFY_STATES,
    Garp,
    Health,
    HealthPath,
    Ipvs,
    Log,
    LogFormat,
    LogLevel,
    Metrics,
    Notify,
    Scripts,
    Track,
)
from vipd.config.source import ENV_OVERRIDES, errors, load, parse, read_text

__all__ = [
    "DEFAULT_METRICS_LISTEN",
    "ENV_OVERRIDES",
    "IPVS_SCHEDULERS",
    "MEMBERSHIP_SOURCES",
    "NOTIFY_STATES",
    "Announce",
    "AuthHmac",
    "Command",
    "Config",
    "ConfigError",
    "Election",
    "Garp",
    "Health",
    "HealthPath",
    "IPAddress",
    "Ipvs",
    "IpvsDiscovery",
    "KubeAccess",
    "Lease",
    "Log",
    "LogFormat",
    "LogLevel",
    "Membership",
    "Metrics",
    "Notify",
    "Scripts",
    "Track",
    "Vrrp",
    "errors",
    "load",
    "parse",
    "read_text",
]

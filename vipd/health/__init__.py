"""Health of the API servers: the local one gates leadership, the backends feed IPVS.

``tracker`` (rise/fall, pure), ``gate`` (effective VRRP priority, pure), ``http`` (the
request and status-line codec, pure) and ``checker`` (the asyncio HTTPS driver).
"""

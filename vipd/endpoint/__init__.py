"""vipd's HTTP endpoint (``server``: /metrics, /healthz, /readyz, /status) and the
``vipd status`` client that reads it (``status``)."""

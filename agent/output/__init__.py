"""What noop shows: the terminal, the Prometheus collector, user metrics, HTTP.

Imports kernel and below only: no service or tools.
"""

DEFAULT_LISTEN = "127.0.0.1:9559"  # noop run's /metrics, /healthz, /readyz

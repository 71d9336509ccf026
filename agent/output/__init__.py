"""What noop shows: the terminal, the Prometheus collector, user metrics, HTTP.

Imports kernel and below only: no service or tools.
"""

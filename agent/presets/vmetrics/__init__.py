"""VictoriaMetrics/metrics, mirrored from a Go program's memory: its Sets, their named
metrics, their values (``layout``, ``walk``, ``values``; ``library`` is what the mirror
asks of it)."""

"""The built-in presets: a program's own Prometheus metrics mirrored, one package per
library (``client_golang``, ``rust_prometheus``), each with its ``facts`` (names,
rules and columns; no binary read), its ``rules`` (finding its updates in a binary)
and its ``decode`` (what an event and an aggregate row tell). Shared: the plans by
build-id (``plans``), the update an event tells (``updates``), the meta-metrics
(``meta``) and the terminal's lines (``printer``). The update-site knowledge a spec's
probe also uses is below, in ``plan.updates``."""

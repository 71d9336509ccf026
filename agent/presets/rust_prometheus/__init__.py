"""The prometheus crate's preset: ``facts`` (its names, columns and site tags, no
binary read), ``rules`` (the plan for a binary) with ``copies``, ``places`` and
``probes`` (finding its updates, where each is probed, each probe's sites and values),
and ``decode`` (what its events and rows tell)."""

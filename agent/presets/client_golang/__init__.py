"""The client_golang preset: ``facts`` (its rules and names, no binary read), ``rules``
(finding its updates in a binary) with ``values``, ``summaries`` and ``cheap`` (what a
site reads, the summaries' sites, noop run's cheaper sites), and ``decode`` (what its
events and rows tell)."""

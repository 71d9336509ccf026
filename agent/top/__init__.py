"""``noop top``: a running program's series ordered by how fast they move, read from its
memory (``model``: readings and rows; ``live``: the session; ``screen``: full screen).
Imports service and below, never tools."""

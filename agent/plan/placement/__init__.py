"""Where each probe goes: the instruction of a function (or of its inlined copies, or
its exits) to put a uprobe on, and how each value is fetched there.

A site must see each call exactly once with every value still in place, and among
those noop picks the cheapest for the kernel (``sites.handling``): a Go function's
stack-check ``jbe`` over its single-stepped ``cmp``; for a float argument in an XMM
register, the first instruction on the once-per-call path where DWARF places it in
memory; a site at each inlined copy where the values are in registers; every RET and
tail jump for exits.

``entry`` places entry probes (``floats`` where a float argument is in an XMM
register), ``exits`` exit probes, ``asyncfn`` an async fn's first poll in its inlined
copies, its end and its drop; ``reads`` reads the values at a candidate instruction.
"""

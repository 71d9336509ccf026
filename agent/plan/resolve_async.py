"""A probe on an async fn, made a probe on its future's first poll: its values read from
what the future captured, the sites gated on the future's state (``Unresumed``: a
call's first poll), and for an exit probe, the call's end where the state becomes
``Returned`` and its cancellation where the future is dropped, paired by the address
of its state.
"""

from __future__ import annotations

from dataclasses import replace

from agent.binary.dwarf.dies import die_name, origin_of
from agent.config.model import DEFAULT_MAX, Probe, Value
from agent.errors import NoopError, nearest
from agent.plan.binary import Binary
from agent.plan.fetches import Fetch, Op
from agent.plan.model import Site, ValueSpec
from agent.plan.placement.asyncfn import drop_sites, state_stores
from agent.plan.resolve_values import Collector
from agent.plan.selectors.rust import FIRST_POLL, Future

_GATE = "__first_poll"  # the value that gates an async fn's probe: its future's state


def async_body(b: Binary, fn: str) -> str | None:
    """For an async fn, the function its future's poll runs its body in (the
    constructor ``fn`` only builds the future); None for any other function."""
    if b.dwarf.language != "rust":
        return None
    try:
        _sym, die = b.functions.find(fn)
    except NoopError:
        return None
    made = b.dwarf.ref(origin_of(die))
    if made is None or not (die_name(made) or "").startswith("{async_fn_env#"):
        return None
    for body in (f"{fn}::{{async_fn#0}}", f"{fn}::{{{{closure}}}}", f"{fn}::{{closure#0}}"):
        if body in b.functions.symbols or b.functions.only_inlined(body):
            return body
    return None


def first_poll(b: Binary, fn: str, body: str, probe: Probe, out: Collector
               ) -> tuple[Probe, Future] | None:
    """``probe`` on async fn ``fn`` as a probe on its future's first poll, in ``body``:
    each value read from what the future captured (its ``Unresumed`` state), and a
    last value, the state itself, for the sites' gate; with the future."""
    future = b.walker.future(b.functions.param_types(body).get("~p0"))
    if future is None:
        out.add(probe.function_mark, f"{fn} is an async fn, but noop cannot find the "
                f"state of its future in {body}", "probe the function it awaits instead",
                probe.name)
        return None
    args = future.args
    values = []
    for v in probe.values:
        if v.builtin is not None:
            values.append(v)
            continue
        if v.result:
            out.add(v.mark, f"{v.name}: the result of async fn {fn} is not read yet (it "
                    "leaves in the Poll its future's last poll returns)",
                    "count the calls, time them with $duration, read their arguments",
                    probe.name)
            return None
        root = v.root
        if root not in args:
            near = nearest(root, args, 1)
            out.add(v.mark, f"async fn {fn} has no parameter {root!r}",
                    (f"did you mean {near[0]!r}? " if near else "") + "parameters: "
                    + (", ".join(args) or "none"), probe.name)
            return None
        inner = v.selector.removeprefix("len(")
        at = f"~p0.{FIRST_POLL}.{inner.lstrip()}"
        values.append(replace(v, selector=f"len({at}" if inner != v.selector else at))
    gate = Value(_GATE, "~p0", None, DEFAULT_MAX, probe.mark)
    return replace(probe, function=body, values=(*values, gate)), future


def first_state(gate: ValueSpec) -> tuple[int, ...]:
    """The value of the gate (a future's state) at a call's first poll: Unresumed."""
    return tuple(v for v, n in gate.names if n == FIRST_POLL)


def gated_sites(sites: list[Site], first: tuple[int, ...]) -> list[Site]:
    """The sites of an async fn's first poll: the last fetch, the future's state, made
    their gate (a hit counts only while the state is ``first``: still ``Unresumed``)."""
    return [replace(s, fetches=s.fetches[:-1], gate=s.fetches[-1], gate_values=first,
                    why=s.why + "; only a call's first poll (its future still "
                    f"{FIRST_POLL}), so each call counts once")
            for s in sites]


def async_exit(b: Binary, fn: str, probe: Probe, future: Future, first: list[Site],
               out: Collector) -> list[Site]:
    """An exit probe on async fn ``fn``, from the sites of its first poll (``first``):
    they keep the call's record, by the address of its future's state; its end is
    where its body stores ``Returned`` into that state (the sites read what the first
    poll kept, and time it), and a future dropped with its record still there was
    cancelled (``drop`` sites, at its drop glue)."""
    body = first[0].function
    done = future.states.get("Returned")
    later = tuple(Fetch("later") if v.builtin is not None and v.at != "entry" else None
                  for v in probe.values)
    calls = []
    for s in first:
        gate = s.gate
        if gate is None or gate.kind != "mem":
            continue  # the state in a register: no address to pair by
        key = Fetch("root", (*gate.ops, Op("add", offset=gate.offset)))
        calls.append(replace(s, role="call", key=key, fetches=tuple(
            lf or f for lf, f in zip(later, s.fetches, strict=True)),
            why="the call's first poll, kept for its end: " + s.why))
    ends = tuple(Fetch("builtin", builtin=v.builtin) if v.builtin is not None
                 and v.at != "entry" else Fetch("saved", slot=i)
                 for i, v in enumerate(probe.values))
    stores = state_stores(b, body, future.state, future.size, done) \
        if done is not None else []
    drops = drop_sites(b, future.type, future.state)
    if not calls or not stores:
        out.add(probe.function_mark, f"{fn} is an async fn, and noop finds no "
                + ("first poll whose future it can tell apart" if not calls else
                   "place where its future's state becomes Returned"),
                "probe its entry (its first poll) instead", probe.name)
        return []
    return [*calls,
            *(Site(body, a, b.elf.file_offset(a), why, ends, role="return", key=k)
              for a, k, why in stores),
            *(Site(f, a, b.elf.file_offset(a), why, tuple(Fetch("later") for _ in ends),
                   role="drop", key=k) for f, a, k, why in drops)]

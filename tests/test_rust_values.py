"""Rust's everyday values read as a Rust programmer writes them, against what the
program passed and returned, per call.

tests/programs/rust/ledger is built at opt-level 3 with debug info. Each call prints
one JSON line with every value it passed (String, &str, Vec elements and lengths,
Option, enum variants and their fields, tuple fields, an Arc'd and an Rc'd struct's
fields, atomics, a Cell, a Mutex, a newtype) and what it returned; a trace must read
each of them exactly, a value of an inactive variant or a missing element as absent.
Privileged: real BPF.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness.noop import tracing
from harness.programs import NoopRun

CALLS = 13  # a prime: each of the three variants, Some and None, and 0..3 tags recur

SPEC = """
targets: {ledger: {binary: BINARY}}
probes:
  - name: post
    function: 'ledger::Ledger::post'
    values:
      account: e.account
      memo: e.memo
      amount: e.amount_cents
      kind: e.kind
      fee: e.kind.Debit.fee
      reason: e.kind.Debit.reason
      t0: e.kind.Transfer.0
      t1: e.kind.Transfer.1
      tag0: e.tags[0]
      tag2: e.tags[2]
      ntags: len(e.tags)
      naccount: len(e.account)
      reference: e.reference
      parent: e.parent.account
      pair0: e.pair.0
      pair1: e.pair.1
      limit: self.cfg.limit
      cfg_name: self.cfg.name
      shared_limit: self.shared.limit
      posted: self.posted
      open: self.open
      balance: self.balance
      last: self.last
      distance: self.distance
      history_len: len(self.history)
      batch: batch
  - name: posted
    function: 'ledger::Ledger::post'
    at: exit
    values: {r: '~r0', took: $duration}
  - name: done
    function: 'ledger::Ledger::post_done'
    values: {note: note, n: len(note)}
  - name: described
    function: 'ledger::describe'
    at: exit
    values: {r: '~r0'}
  - name: classify
    function: 'ledger::classify'
    values: {kind: kind, code: {read: kind, as: int}}
  - name: settle
    function: 'ledger::settle'
    values: {reference: reference, nmemo: len(memo), code: code}
  - name: quote
    function: 'ledger::quote'
    values: {s: s, n: len(s)}
"""

VARIANTS = {"Credit": 0, "Debit": 1, "Transfer": 2}


def _post(c: dict[str, Any]) -> dict[str, Any]:
    tags = c["tags"]
    return {"account": c["account"], "memo": c["memo"], "amount": c["amount"],
            "kind": c["kind"], "fee": c["fee"], "reason": c["reason"], "t0": c["t0"],
            "t1": c["t1"], "tag0": tags[0] if tags else None,
            "tag2": tags[2] if len(tags) > 2 else None, "ntags": len(tags),
            "naccount": len(c["account"]), "reference": c["reference"],
            "parent": c["parent"], "pair0": c["pair0"], "pair1": c["pair1"],
            "limit": c["limit"], "cfg_name": c["cfg_name"],
            "shared_limit": c["shared_limit"], "posted": c["posted"], "open": c["open"],
            "balance": c["balance"], "last": c["last"], "distance": c["distance"],
            "history_len": c["history_len"], "batch": c["batch"]}


EXPECTED: list[tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]] = [
    ("post", _post),
    ("done", lambda c: {"note": c["note"], "n": len(c["note"])}),
    ("described", lambda c: {"r": c["described"]}),
    ("classify", lambda c: {"kind": c["kind"], "code": VARIANTS[c["kind"]]}),
    ("settle", lambda c: {"reference": c["reference"], "nmemo": len(c["memo"]),
                          "code": c["code"]}),
]


def test_trace_reads_rust_values_as_passed(privileged: None, rust_ledger: Path,
                                           tmp_path: Path) -> None:
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.replace("BINARY", str(rust_ledger)))
    with tracing(tmp_path, "--config", spec) as noop:
        done = subprocess.run([str(rust_ledger), str(CALLS)], capture_output=True, text=True,
                              timeout=120, check=True)
    assert noop.exit == 0, noop.stderr
    calls = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(calls) == CALLS
    assert {c["kind"] for c in calls} == set(VARIANTS)
    for probe, truth in EXPECTED:
        lines = [line for line in noop.lines if line["probe"] == probe]
        assert [line["values"] for line in lines] == [truth(c) for c in calls], probe
        for line in lines:  # what is None was absent (another variant, None, no element)
            missing = sorted(k for k, v in line["values"].items() if v is None)
            assert sorted(line.get("absent", [])) == missing, line
            assert not line.get("faults") and not line.get("unreadable"), line
    posted = [line["values"] for line in noop.lines if line["probe"] == "posted"]
    assert [p["r"] for p in posted] == [c["result"] for c in calls]
    assert all(p["took"] > 0 for p in posted)
    # quote exists only inlined (into main, several times): each call, from every copy.
    quoted = [line["values"] for line in noop.lines if line["probe"] == "quote"]
    assert sorted(q["s"] for q in quoted) == sorted(_quoted(calls))
    assert all(q["n"] == len(q["s"]) for q in quoted)


def _quoted(calls: list[dict[str, Any]]) -> list[str]:
    """The strings main passes to quote for each call."""
    out = []
    for c in calls:
        out += [c["account"], c["memo"], c["pair1"], c["cfg_name"], c["described"], c["note"]]
        out += [c[k] for k in ("reason", "parent") if c[k] is not None]
    return out


def test_funcs_lists_functions_that_exist_only_inlined(rust_ledger: Path,
                                                       noop_json: Callable[..., Any]) -> None:
    """quote has no code of its own: funcs lists it with its copies, as many as
    llvm-dwarfdump finds DW_TAG_inlined_subroutine entries of it."""
    info = subprocess.run(["llvm-dwarfdump", "--debug-info", str(rust_ledger)],
                          capture_output=True, text=True, check=True, timeout=120).stdout
    blocks = info.split("DW_TAG_inlined_subroutine")[1:]
    copies = sum(1 for b in blocks
                 if '"_ZN6ledger5quote' in b.split("DW_TAG_", 1)[0])
    assert copies > 1
    got = noop_json("funcs", rust_ledger, "ledger::*", "--json")["functions"]
    rows = {r["name"]: r for r in got}
    assert rows["ledger::quote"] == {"name": "ledger::quote", "address": 0, "size": 0,
                                     "inlined": copies, "only_inlined": True}
    assert rows["ledger::Ledger::post"]["address"] > 0
    assert not any(r["name"].startswith("_ZN") for r in got)


def test_vars_places_values_passed_by_reference(rust_ledger: Path,
                                                noop_json: Callable[..., Any]) -> None:
    """rustc passes a String by reference and says so in DWARF (DW_OP_breg4: in memory
    at rsi); a String result comes back in memory whose address is in rax."""
    done = noop_json("vars", rust_ledger, "ledger::Ledger::post_done", "--json")
    note = next(p for p in done["params"] if p["name"] == "note")
    assert note["location"] == [{"memory": {"reg": "rsi", "offset": 0}, "size": 24}], note
    described = noop_json("vars", rust_ledger, "ledger::describe", "--json")
    (r,) = described["results"]
    assert r["location"] == [{"memory": {"reg": "rax", "offset": 0}, "size": 24}], r
    post = noop_json("vars", rust_ledger, "ledger::Ledger::post", "--json")
    assert post["results"][0]["location"] == [{"reg": "rax", "size": 8}], post


BAD = [
    ("e.kind.Refund.fee", "ledger::Kind, which has no variant 'Refund'",
     "its variants: Credit, Debit, Transfer"),
    ("len(e.amount_cents)", "len(e.amount_cents): e.amount_cents is i64, which has no length",
     "len() takes strings, slices, Vec and maps"),
    ("e", "e is ledger::Entry, which has no single value", "its fields: "),
    ("e.kind.Debit", "e.kind.Debit is ledger::Kind::Debit, which has no single value",
     "its fields: fee, reason"),
    ("e.pair", "which has no single value", "its fields: 0, 1"),
    ("self.cfg.limits", "ledger::Config has no field 'limits'", "its fields: limit, name"),
    ("e.tags[0].x", "e.tags[0] is u16, not a struct", "drop '.x'"),
    ("len(e.memo.x)", "&str has no field 'x'", "its fields: data_ptr, length"),
]


def _refused(noop: NoopRun, tmp_path: Path, binary: Path, probes: str) -> list[str]:
    """What noop check says of a spec with ``probes`` on ``binary``: its lines."""
    spec = tmp_path / "probes.yaml"
    spec.write_text(f"targets: {{l: {{binary: {binary}}}}}\nprobes:\n{probes}")
    done = noop("check", "--config", spec)
    assert done.returncode == 2, done.stdout
    assert "Traceback" not in done.stderr
    return done.stderr.strip().splitlines()


def test_check_names_rust_functions(rust_ledger: Path, noop: NoopRun, tmp_path: Path) -> None:
    a, b = _refused(noop, tmp_path, rust_ledger,
                    "  - {name: a, function: 'ledger::Ledger::pots'}\n"
                    "  - {name: b, function: 'ledger::quote', at: exit, values: {r: '~r0'}}\n")
    assert "function 'ledger::Ledger::pots' not found (did you mean ledger::Ledger::post," in a
    assert "ledger::quote exists only inlined" in b and "probe its entry" in b


@pytest.mark.parametrize(("selector", "message", "hint"), BAD)
def test_check_says_what_can_be_read(rust_ledger: Path, noop: NoopRun, tmp_path: Path,
                                     selector: str, message: str, hint: str) -> None:
    (line,) = _refused(noop, tmp_path, rust_ledger,
                       f"  - {{name: p, function: 'ledger::Ledger::post', "
                       f"values: {{v: '{selector}'}}}}\n")
    assert message in line and hint in line, line


def test_a_build_without_debug_info_counts_calls(privileged: None, rust_ledger_nodebug: Path,
                                                 noop_json: Callable[..., Any],
                                                 tmp_path: Path) -> None:
    """Cargo's release profile keeps symbols and no DWARF: funcs lists the functions,
    demangled, and a probe with no values counts every call."""
    sections = subprocess.run(["readelf", "-S", str(rust_ledger_nodebug)], capture_output=True,
                              text=True, check=True, timeout=60).stdout
    assert ".symtab" in sections and ".debug_info" not in sections
    got = noop_json("funcs", rust_ledger_nodebug, "ledger::*", "--json")
    assert got["debug"] == "the symbol table only: a Rust build without debug info"
    names = {r["name"] for r in got["functions"]}
    assert {"ledger::Ledger::post", "ledger::settle", "ledger::describe"} <= names
    spec = tmp_path / "probes.yaml"
    spec.write_text(f"targets: {{l: {{binary: {rust_ledger_nodebug}}}}}\nprobes:\n"
                    "  - {name: post, function: 'ledger::Ledger::post'}\n"
                    "  - {name: settle, function: 'ledger::settle', values: {t: $tid}}\n")
    with tracing(tmp_path, "--config", spec) as noop:
        done = subprocess.run([str(rust_ledger_nodebug), str(CALLS)], capture_output=True,
                              text=True, timeout=120, check=True)
    assert noop.exit == 0, noop.stderr
    assert len(done.stdout.splitlines()) == CALLS
    for probe in ("post", "settle"):
        assert sum(line["probe"] == probe for line in noop.lines) == CALLS, probe


@pytest.mark.parametrize(("program", "why"), [
    ("rust_ledger_nodebug", "the binary is a Rust build without debug info"),
    ("rust_ledger_lines", 'built with line tables only (debug = "line-tables-only")'),
])
def test_values_without_debug_info_say_what_would_help(request: pytest.FixtureRequest,
                                                       noop: NoopRun, tmp_path: Path,
                                                       program: str, why: str) -> None:
    binary: Path = request.getfixturevalue(program)
    lines = _refused(noop, tmp_path, binary, "  - {name: p, function: 'ledger::Ledger::post', "
                     "values: {a: e.amount_cents, b: batch}}\n")
    assert len(lines) == 2, lines  # one for each value
    for line in lines:
        assert "ledger::Ledger::post has no known parameters" in line and why in line
        assert "debug = 2 under [profile.release]" in line
    done = noop("struct", binary, "ledger::Entry")
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr

"""Plans kept by build-id: a start that finds its plan opens no DWARF, and what it
finds is exactly what resolving again would make; a changed spec or a damaged entry
is resolved again, never trusted."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from agent import cache
from agent.config import probes as spec
from agent.config.model import Spec
from agent.plan import binary, plain, resolve
from agent.plan.model import Plan
from agent.presets import plans as presets

REPO = Path(__file__).resolve().parent.parent


def _no_dwarf(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("a kept plan opened the binary's DWARF")

    monkeypatch.setattr(binary.Binary, "__init__", refuse)


def _spec(example: Path, value: str = "o.Items[0].SKU") -> Spec:
    text = (REPO / "probes.yaml").read_text().replace("build/go-prometheus", str(example))
    return spec.parse(text.replace("o.Items[0].SKU", value), str(REPO / "probes.yaml"))


@pytest.mark.parametrize("aggregate", [False, True])
def test_the_preset_kept_is_the_preset_made(example: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             aggregate: bool) -> None:
    monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path))
    made = presets.plan(str(example), 42, aggregate)
    assert plain.load(Plan, json.loads(json.dumps(plain.dump(made)))) == made
    _no_dwarf(monkeypatch)
    kept = presets.plan(str(example), 7, aggregate)
    assert kept.targets[0].pid == 7
    assert kept == replace(made, targets=(replace(made.targets[0], pid=7),))


def test_a_spec_kept_is_the_spec_resolved(example: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's spec (entry and exit probes, metrics, labels, decoders): kept and
    read back equal; another value in one probe is another plan, resolved again."""
    monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path))
    made = resolve.resolve(_spec(example), False, wait=True)
    assert any(p.at == "exit" for p in made.probes) and any(p.metrics for p in made.probes)
    with monkeypatch.context() as m:
        _no_dwarf(m)
        assert resolve.resolve(_spec(example), False, wait=True) == made
        with pytest.raises(AssertionError, match="opened the binary's DWARF"):
            resolve.resolve(_spec(example, "o.Items[0].Qty"), False, wait=True)
    other = resolve.resolve(_spec(example, "o.Items[0].Qty"), False, wait=True)
    assert other != made
    assert resolve.resolve(_spec(example), True, wait=True) is not None  # XMM: its own key


def test_a_damaged_plan_is_resolved_again(example: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path))
    made = resolve.resolve(_spec(example), False, wait=True)
    entries = list(tmp_path.rglob("plan-*.json"))
    assert entries
    for entry in entries:  # sound JSON under a sound digest, but not a plan
        doc = json.loads(entry.read_bytes().splitlines()[-1])
        entry.write_bytes(cache.encode(doc["key"], [{"name": 3}, []]))
    assert resolve.resolve(_spec(example), False, wait=True) == made


def test_plain_refuses_what_does_not_fit() -> None:
    from agent.plan.model import Column
    with pytest.raises(ValueError):
        plain.load(Column, {"name": "a", "op": "sum"})  # a field missing: KeyError
    with pytest.raises(ValueError):
        plain.load(Column, {"name": 1, "op": "sum", "value": "v", "bounds": [],
                            "mask": 0, "add": 0})
    col = Column("c", "hist", "v", bounds=(1, 2))
    assert plain.load(Column, plain.dump(col)) == col


KINDS = [("Op", "op"), ("Fetch", "kind"), ("ValueSpec", "decode"), ("Site", "role"),
         ("Column", "op"), ("MetricPlan", "kind"), ("MetricPlan", "where")]


@pytest.mark.parametrize(("cls", "field"), KINDS)
def test_a_kind_is_one_of_its_names_and_a_kept_plan_with_another_is_refused(
        cls: str, field: str) -> None:
    """Each kind of a plan's parts is a Literal (mypy's strict equality refuses a
    misspelled comparison), and an entry that holds a name it does not allow does not
    load: it is resolved again."""
    import typing

    from agent.plan import fetches, model
    owner = fetches if hasattr(fetches, cls) else model  # Op, Fetch: the fetches'
    kind = typing.get_type_hints(getattr(owner, cls))[field]
    assert typing.get_origin(kind) is typing.Literal
    names = typing.get_args(kind)
    assert all(plain.load(kind, n) == n for n in names)
    with pytest.raises(ValueError):
        plain.load(kind, names[-1] + "x")

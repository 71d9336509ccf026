"""The on-disk cache gives out only what it verified: an entry's digest is checked on
every read, and each caller's loader lets through only a value of the shape it relies
on. Whatever bytes or JSON an entry holds, ``get`` answers None or such a value, never
an exception; a damaged entry, a wrong-shaped one (the calibrated costs, kernel facts,
DWARF indexes, inspection answers) is computed again; a write that fails (a full or
read-only disk) raises nothing and leaves no temporary file. No root needed.
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import json
import math
import os
import platform
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agent import cache, cpus, files
from agent.binary import debuginfo
from agent.binary.amd64 import DWARF_REGS
from agent.binary.dwarf import frames, functions, listing, lookup, reader
from agent.binary.dwarf.types import TypeNamer
from agent.binary.elf import ElfFile
from agent.errors import NoopError
from agent.kernel import cost, kfeatures
from agent.tools import answers, inspect, render

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
BID = "0123456789abcdef-feedfacecafebeef"
EMULATED, STEPPED = cost.CLASSES


@pytest.fixture
def where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of this test's own."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("NOOP_CACHE_DIR", str(folder))
    monkeypatch.delenv("NOOP_NO_CACHE", raising=False)
    return folder


def _entry(key: str, value: Any, digest_ok: bool = True) -> bytes:
    """An entry's bytes as the format says (written here, not by the code under test):
    ``noop-cache 1 SHA256`` over the JSON text that follows."""
    body = json.dumps({"key": key, "value": value}).encode()
    digest = hashlib.sha256(body if digest_ok else body + b" ").hexdigest()
    return f"noop-cache 1 {digest}\n".encode() + body


def _write(kind: str, key: str, raw: bytes, build_id: str = BID) -> Path:
    path = cache._path(build_id, kind, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)
    return path


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


# --- each real caller's loader, and the shape its caller relies on (checked here
# without cache.check: by hand, or by rendering the answer as the commands do) ----------

def _ints(v: Any) -> bool:
    return type(v) is list and all(type(x) is int for x in v)


def _offsets_ok(v: Any) -> bool:
    return type(v) is dict and all(type(k) is str and _ints(x) for k, x in v.items())


def _by_offset_ok(v: Any) -> bool:
    return type(v) is dict and all(type(k) is int and k >= 0 and _ints(x)
                                   for k, x in v.items())


def _one(v: Any) -> bool:
    return type(v) is tuple and len(v) == 1


def _cfa_ok(v: Any) -> bool:
    return _one(v) and (v[0] is None or (
        type(v[0]) is tuple and len(v[0]) == 2 and v[0][0] in DWARF_REGS.values()
        and type(v[0][1]) is int))


def _costs_ok(v: Any) -> bool:
    return type(v) is dict and set(v) == set(cost.CLASSES) and all(
        type(x) is float and math.isfinite(x) and x >= 0 for x in v.values())


def _xmm_ok(v: Any) -> bool:
    return _one(v) and (v[0] is None or (type(v[0]) is str and v[0] in kfeatures.XMM_HELPERS))


def _cookie_ok(v: Any) -> bool:
    return _one(v) and type(v[0]) is bool


def _lines_table(v: dict[str, Any]) -> str:
    got = dict(v)  # what function_lines does with an answer before the table
    for entry in got["lines"]:
        assert isinstance(entry["file"], str)
        _ = 0 < entry["line"] <= 10
    got["source_found"] = []
    return render.lines_table(got)


RENDER: dict[str, Callable[[Any], str]] = {
    "struct": render.struct,
    "vars": render.vars_table,
    "funcs": lambda rows: render.funcs_table(
        [r for r in rows if fnmatch.fnmatchcase(r["name"], "w*")]),
    "lines": _lines_table,
    "line-vars": render.line_vars_table,
}


def _renders(kind: str) -> Callable[[Any], bool]:
    def ok(v: Any) -> bool:
        json.dumps(v)  # noop's --json
        return isinstance(RENDER[kind](v), str)
    return ok


LOADERS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], bool]]] = {
    "inlined": (listing._by_offset, _by_offset_ok),
    "inlined-names": (listing._offsets, _offsets_ok),
    "types": (lookup._cached_index, _offsets_ok),
    "cfa-rule": (frames._cfa_entry, _cfa_ok),
    "uprobe-costs": (cost._ns, _costs_ok),
    "xmm": (kfeatures._xmm_answer, _xmm_ok),
    "cookie": (kfeatures._cookie_answer, _cookie_ok),
    **{k: (cache.shaped(shape), _renders(k)) for k, shape in answers.SHAPES.items()},
}

_PIECES = [{"memory": {"reg": "rbp", "offset": -8}, "size": 8}, {"reg": "rdi", "size": 8},
           {"reg": "rsp", "add": 16, "size": 8}, {"stack": 8, "size": 4},
           {"optimized_out": True, "size": 4}]
_VAR = {"name": "j", "type": "struct job *", "size": 8, "location": _PIECES,
        "source": "dwarf"}
# Values as each caller writes them (the inspection answers as compute gives them).
SAMPLES: dict[str, list[Any]] = {
    "inlined": [{"1250": [761, 802]}, {}],
    "inlined-names": [{"atoi": [1250], "main.(*T).add": [40, 96]}],
    "types": [{"struct job": [46, 120], "int": [60]}],
    "cfa-rule": [{"rule": ["rsp", 8]}, {"rule": ["rbp", 16]}, {"rule": None}],
    "uprobe-costs": [{EMULATED: 501.25, STEPPED: 9169.0}, {EMULATED: 0, STEPPED: 7}],
    "xmm": [{"answer": None}, {"answer": kfeatures.XMM_HELPERS[0]}],
    "cookie": [{"answer": True}, {"answer": False}],
    "struct": [{"name": "struct flags", "kind": "structure", "language": "c", "size": 16,
                "members": [{"name": "ready", "type": "unsigned int", "offset": 0,
                             "size": 4, "bit_offset": 0, "bit_size": 1},
                            {"name": "tag", "type": "char", "offset": 8, "size": 1,
                             "discriminant": True, "discr_value": 2}],
                "debug": "in the binary"}],
    "vars": [{"function": "with_job", "address": 4688, "file_offset": 4688,
              "language": "c", "abi": "sysv", "go_version": None,
              "params": [_VAR, {**_VAR, "location": None, "note": "optimized out"}],
              "results": [], "debug": "in the binary", "note": "a note"}],
    "funcs": [[{"name": "with_job", "address": 4688, "size": 30, "inlined": 0},
               {"name": "atoi", "address": 0, "size": 0, "inlined": 2,
                "only_inlined": True}]],
    "lines": [{"function": "with_job", "file": "/src/layouts.c", "copies": 2,
               "out_of_line": True,
               "lines": [{"file": "/src/layouts.c", "line": 102, "sites": [],
                          "inlines": []},
                         {"file": "/src/layouts.c", "line": 104,
                          "sites": [{"address": 4700}, {"address": 4800, "in": "main"}],
                          "inlines": ["atoi"]}]}],
    "line-vars": [{"line": "with_job:104", "debug": "in the binary",
                   "sites": [{"address": 4700, "file_offset": 4700, "file": "/src/l.c",
                              "line": 104, "function": "with_job", "inlined_into": "main",
                              "vars": [{"name": "j", "kind": "param", "type": "int",
                                        "size": 4, "location": _PIECES},
                                       {"name": "k", "kind": "local", "type": "int",
                                        "size": 4, "location": None, "note": "gone"}]}]}],
}

# Arbitrary JSON, with the keys and strings the real values use so that near misses
# come up, and floats JSON cannot write (an entry written by something else).
_WORDS = sorted({k for samples in SAMPLES.values() for s in samples
                 for k in json.dumps(s).replace('"', " ").split() if k.isidentifier()}
                | {"in", "single-stepped", "1250"})
_LEAF = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats()
         | st.text(max_size=6) | st.sampled_from(_WORDS))
JSON = st.recursive(_LEAF, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.sampled_from(_WORDS) | st.text(max_size=4), inner, max_size=5), max_leaves=24)


@st.composite
def _mutated(draw: st.DrawFn, name: str) -> Any:
    """A real value with one part of it replaced by arbitrary JSON, or removed."""
    value = json.loads(json.dumps(draw(st.sampled_from(SAMPLES[name]))))
    holder, at = None, None
    node: Any = value
    while isinstance(node, (dict, list)) and node and draw(st.booleans()):
        at = draw(st.sampled_from(sorted(node) if isinstance(node, dict)
                                  else range(len(node))))
        holder, node = node, node[at]
    if holder is None:
        return draw(JSON)
    if isinstance(holder, dict) and draw(st.booleans()):
        del holder[at]
    else:
        holder[at] = draw(JSON)
    return value


class TestEveryEntryIsVerified:
    @SETTINGS
    @given(name=st.sampled_from(sorted(LOADERS)), data=st.data())
    def test_get_answers_none_or_the_shape_its_caller_needs(
            self, where: Path, name: str, data: st.DataObject) -> None:
        load, ok = LOADERS[name]
        key = "k"
        how = data.draw(st.sampled_from(["json", "near", "bad-digest", "entry", "bytes"]))
        if how in ("json", "near", "bad-digest"):
            value = data.draw(JSON if how != "near" else _mutated(name))
            raw = _entry(key, value, digest_ok=how != "bad-digest")
        elif how == "entry":  # a verified text that is not {"key": ..., "value": ...}
            text = data.draw(JSON)
            assume(not isinstance(text, dict) or text.get("key") != key)
            body = json.dumps(text).encode()
            raw = f"noop-cache 1 {hashlib.sha256(body).hexdigest()}\n".encode() + body
        else:
            raw = data.draw(st.binary(max_size=200))
        _write(name, key, raw)
        got = cache.get(BID, name, key, load=load)
        assert got is None or ok(got), got
        if how in ("bad-digest", "bytes", "entry"):
            assert got is None

    @pytest.mark.parametrize("name", sorted(SAMPLES))
    def test_each_kinds_values_read_back(self, where: Path, name: str) -> None:
        load, ok = LOADERS[name]
        for n, value in enumerate(SAMPLES[name]):
            key = f"key {n}"
            cache.put(BID, name, key, value)
            got = cache.get(BID, name, key, load=load)
            assert got is not None and ok(got)
            assert got == load(json.loads(json.dumps(value)))
            assert cache.get(BID, name, key) == value  # the old call form: as read
        assert cache.get(BID, name, "never put", load=load) is None

    def test_a_damaged_byte_anywhere_is_a_miss(self, where: Path) -> None:
        for name in ("types", "struct"):
            value = SAMPLES[name][0]
            cache.put(BID, name, "k", value)
            path = cache._path(BID, name, "k")
            raw = path.read_bytes()
            assert raw.startswith(b"noop-cache 1 ")
            assert cache.get(BID, name, "k", load=LOADERS[name][0]) == value
            for i in range(len(raw)):
                for bit in (0x01, 0x20):
                    path.write_bytes(raw[:i] + bytes([raw[i] ^ bit]) + raw[i + 1:])
                    assert cache.get(BID, name, "k") is None, (i, bit)
            for n in range(len(raw)):  # a partial write
                path.write_bytes(raw[:n])
                assert cache.get(BID, name, "k") is None, n
            head, _, body = raw.partition(b"\n")
            path.write_bytes(body)  # the old format: no digest
            assert cache.get(BID, name, "k") is None
            path.write_bytes(head.replace(b" 1 ", b" 2 ") + b"\n" + body)  # a later format
            assert cache.get(BID, name, "k") is None

    def test_a_key_that_is_not_utf8(self, where: Path) -> None:
        key = "caf\udce9"  # a command-line argument of bytes that are not UTF-8
        cache.put(BID, "vars", key, {"a": 1})
        assert cache.get(BID, "vars", key) == {"a": 1}
        assert cache.get(BID, "vars", "caf\udce8") is None


def _full(*_args: Any, **_kwargs: Any) -> Any:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class _Half:
    """A file whose disk fills up half-way through the write."""

    def __init__(self, fd: int, mode: str) -> None:
        self.f = open(fd, mode)  # noqa: SIM115

    def __enter__(self) -> _Half:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.f.close()

    def write(self, data: bytes) -> int:
        self.f.write(data[: len(data) // 2])
        self.f.flush()
        raise self.error

    error: BaseException = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class TestWrites:
    @pytest.mark.parametrize("fails", ["write", "replace", "replace-erofs", "interrupt"])
    def test_a_failed_write_leaves_nothing(self, where: Path, monkeypatch: pytest.MonkeyPatch,
                                           fails: str) -> None:
        cache.put(BID, "types", "other", {"x": [1]})  # the folder exists, with an entry
        before = _files(where)
        with monkeypatch.context() as patch:
            if fails == "replace":
                patch.setattr(os, "replace", _full)
            elif fails == "replace-erofs":
                def erofs(*_a: Any) -> None:
                    raise OSError(errno.EROFS, os.strerror(errno.EROFS))
                patch.setattr(os, "replace", erofs)
            else:
                half = type("Half", (_Half,), {"error": KeyboardInterrupt()
                                               if fails == "interrupt" else _Half.error})
                patch.setattr(cache, "open", half, raising=False)
            if fails == "interrupt":
                with pytest.raises(KeyboardInterrupt):
                    cache.put(BID, "types", "k", {"struct job": [46]})
            else:
                assert cache.put(BID, "types", "k", {"struct job": [46]}) is None
        assert _files(where) == before
        assert not list(where.rglob(".tmp-*"))
        assert cache.get(BID, "types", "k") is None

    def test_a_value_json_cannot_keep_is_skipped(self, where: Path) -> None:
        cache.put(BID, "types", "k", {"x": object()})
        cache.put(BID, "types", "n", {"x": [float("nan")]})
        assert _files(where) == []
        assert cache.get(BID, "types", "k") is None
        assert cache.get(BID, "types", "n") is None


    @SETTINGS
    @given(value=st.recursive(
        _LEAF | st.text() | st.sampled_from(["null", "a,null]", "x:null}", "[null,"]),
        lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=4) | st.integers(-3, 2**65) | st.booleans(),
                          inner, max_size=4) | st.sets(st.integers(), max_size=2),
        max_leaves=24))
    def test_an_entry_means_what_jsons_text_would(self, value: Any) -> None:
        """Whoever writes an entry's text (orjson, or json where orjson would write
        another meaning: NaN or an infinity as null, keys that are not strings, integers
        past 64 bits, lone surrogates), it reads back as json's text would, and what
        json refuses to write is refused."""
        try:
            want = json.loads(json.dumps({"key": "k", "value": value}, allow_nan=False))
        except (TypeError, ValueError, RecursionError):
            with pytest.raises((TypeError, ValueError, RecursionError)):
                cache.encode("k", value)
            return
        # repr: the same types too (True is not 1, 1.0 is not 1)
        assert repr(cache.decode(cache.encode("k", value), "k")) == repr(want["value"])

    @pytest.mark.parametrize("depth", [200, 300, 5000])
    def test_a_deep_value_is_written_or_refused_as_json_would(self, depth: int) -> None:
        """Past orjson's 255 levels json writes it; past the interpreter's, refused."""
        value: Any = "x"
        for _ in range(depth):
            value = [value]
        try:
            want = json.loads(json.dumps(value))
        except RecursionError:
            with pytest.raises(RecursionError):
                cache.encode("k", value)
            return
        assert cache.decode(cache.encode("k", value), "k") == want

    def test_a_listing_is_written_by_orjson(self) -> None:
        """The large entries (a listing's rows: no null in them, names that hold
        ``null`` as text) are written at orjson's speed, not json's."""
        import orjson
        rows = [{"name": f"core::ptr::null_mut<{k},null>::é", "address": k, "size": 8,
                 "inlined": k % 3} for k in range(100)]
        raw = cache.encode("all", rows)
        body = raw.partition(b"\n")[2]
        assert body == orjson.dumps({"key": "all", "value": rows})
        assert "é".encode() in body  # json would have written \u00e9
        assert cache.decode(raw, "all") == rows

    def test_an_entry_put_aside_is_what_put_writes(self, where: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(cpus, "alone", lambda: True)  # also in a test runner's worker
        value = {"names": {f"f{i}": [i, i + 1] for i in range(5000)}}
        cache.put_aside(BID, "inlined-names", "v1", value)
        assert cache._pending  # a child writes it
        assert cache.get(BID, "inlined-names", "v1") == value  # waited for
        assert not cache._pending
        aside = cache._path(BID, "inlined-names", "v1").read_bytes()
        cache.put(BID, "inlined-names", "v1", value)
        assert cache._path(BID, "inlined-names", "v1").read_bytes() == aside
        cache.put_aside(BID, "funcs", "all", [1])
        cache.settle()  # as at exit
        assert not cache._pending and cache.get(BID, "funcs", "all") == [1]
        assert not list(where.rglob(".tmp-*"))

    @pytest.mark.parametrize("how", ["a file", "read-only"])
    def test_an_entry_put_aside_that_cannot_be_written_is_said_once_here(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str], how: str) -> None:
        folder = tmp_path / "cache"
        if how == "a file":
            folder.write_text("")
        else:
            folder.mkdir()
            folder.chmod(0o500)
            if os.access(folder, os.W_OK):  # root writes anywhere: a read-only file
                folder.chmod(0o700)          # where the entry's folder goes instead
                (folder / "dwarf").write_text("")
        monkeypatch.setenv("NOOP_CACHE_DIR", str(folder))
        monkeypatch.setattr(cache, "_said", [])
        monkeypatch.setattr(cache, "_failed", [])
        monkeypatch.setattr(cpus, "alone", lambda: True)
        for kind in ("inlined", "inlined-names", "funcs"):
            cache.put_aside(BID, kind, "v1", {"x": [1]})
        assert len(cache._pending) == 3
        cache.settle()
        said = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(said) == 1 and str(folder) in said[0] and "cache:" in said[0], said
        assert cache.get(BID, "funcs", "v1") is None

    def test_with_another_thread_running_an_entry_is_put_here(
            self, where: Path) -> None:
        done = threading.Event()
        other = threading.Thread(target=done.wait)
        other.start()
        try:
            cache.put_aside(BID, "funcs", "all", [2])
            assert not cache._pending
            assert cache._path(BID, "funcs", "all").exists()
        finally:
            done.set()
            other.join()
        assert cache.get(BID, "funcs", "all") == [2]


@pytest.fixture
def fresh_costs() -> Iterator[None]:
    """costs() remembers its answer per process: forgotten before and after."""
    cost.costs.cache_clear()
    yield
    cost.costs.cache_clear()


WRONG_COSTS: list[Any] = [
    {EMULATED: True, STEPPED: 5.0}, {EMULATED: -1.0, STEPPED: 5.0},
    {EMULATED: "501", STEPPED: 5.0}, {EMULATED: 501.0}, [501.0, 9169.0], 501.0,
    {EMULATED: float("nan"), STEPPED: 5.0}, {EMULATED: float("inf"), STEPPED: 5.0},
]


class TestMachineFacts:
    def test_costs_of_a_wrong_shape_are_calibrated_again(
            self, where: Path, monkeypatch: pytest.MonkeyPatch, fresh_costs: None) -> None:
        calls = []
        ns = {EMULATED: 500.0, STEPPED: 9000.0}

        def calibrate() -> cost.Costs:
            calls.append(1)
            return cost.Costs(dict(ns), cost.machine())

        monkeypatch.setattr(cost, "calibrate", calibrate)
        assert cost.known() is None
        assert cost.costs().ns == ns and len(calls) == 1
        cost.costs.cache_clear()
        kept = cost.costs()
        assert kept.cached and kept.ns == ns and len(calls) == 1
        path = cache._path("machine", "uprobe-costs", cost.machine())
        for n, wrong in enumerate(WRONG_COSTS, start=2):
            path.write_bytes(_entry(cost.machine(), wrong))
            cost.costs.cache_clear()
            assert cost.known() is None, wrong
            got = cost.costs()
            assert got.ns == ns and not got.cached and len(calls) == n, wrong

    def test_a_full_disk_while_calibrating_is_said_in_one_line(
            self, where: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(cost, "open", _full, raising=False)
        with pytest.raises(NoopError, match=r"cannot calibrate.*No space left"), cost._loop():
            pass
        assert not list(where.glob("calibrate-*"))

    @pytest.mark.skipif(platform.machine() != "x86_64", reason="the loop is amd64 code")
    def test_calibrating_on_a_full_cache_disk_uses_another_folder(
            self, where: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        def open_(path: str, mode: str = "r") -> Any:
            if path.startswith(str(where)):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return open(path, mode)

        monkeypatch.setattr(cost, "open", open_, raising=False)
        with cost._loop() as (path, run):
            assert not path.startswith(str(where))
            run(3)
        assert not list(where.glob("calibrate-*"))

    @pytest.mark.parametrize(("fact", "kind", "wrong"), [
        ("cookie", "cookie", [{"answer": "no"}, {"answer": 1}, {"answer": None}, [True], {}]),
        ("xmm", "xmm", [{"answer": "bpf_read_anything"}, {"answer": 1}, {"answer": True},
                        {"answer": ["bpf_get_fp_reg"]}, {"other": None}, "bpf_get_fp_reg"]),
    ])
    def test_kernel_facts_of_a_wrong_shape_are_computed_again(
            self, where: Path, monkeypatch: pytest.MonkeyPatch, fact: str, kind: str,
            wrong: list[Any]) -> None:
        calls = []

        def btf(path: Path = kfeatures.VMLINUX_BTF) -> None:
            calls.append(path)  # a kernel without BTF: no cookies, no XMM helper

        monkeypatch.setattr(kfeatures, "vmlinux_btf", btf)
        ask = kfeatures.attach_cookies if fact == "cookie" else \
            kfeatures.xmm_helper_available
        truth = False if fact == "cookie" else None
        assert ask() is truth and len(calls) == 1
        assert ask() is truth and len(calls) == 1  # read back
        [path] = where.rglob(f"{kind}-*.json")
        key = json.loads(path.read_bytes().splitlines()[-1])["key"]
        for n, value in enumerate(wrong, start=2):
            path.write_bytes(_entry(key, value))
            assert ask() is truth and len(calls) == n, value


class TestTargetIndexes:
    def test_read_back_when_they_fit_computed_again_when_not(
            self, where: Path, monkeypatch: pytest.MonkeyPatch, c_dropped_gcc: Path) -> None:
        def answers() -> tuple[Any, ...]:
            dwarf = reader.open_dwarf(c_dropped_gcc)
            fns = functions.Functions(dwarf, TypeNamer(dwarf))
            main = next(s.address for s in dwarf.elf.function_symbols() if s.name == "main")
            return (fns._inlined_index(), fns._named(), lookup._index(dwarf, True),
                    dwarf.frames.cfa_rule_at(main), dwarf.cache_id)

        *cold, bid = answers()
        assert cold[0] and cold[1] and cold[2] and cold[3] is not None
        counted: dict[str, int] = {}
        for cls, method in ((reader.Dwarf, "inlined_index"), (reader.Dwarf, "names_at"),
                            (frames.CallFrames, "_cfa_rule")):
            real = getattr(cls, method)

            def counting(self: Any, *a: Any, _real: Any = real, _m: str = method) -> Any:
                counted[_m] = counted.get(_m, 0) + 1
                return _real(self, *a)
            monkeypatch.setattr(cls, method, counting)
        types = lookup._from_tree  # the types index: read from the raw bytes

        def typed(*a: Any) -> Any:
            counted["types"] = counted.get("types", 0) + 1
            return types(*a)
        monkeypatch.setattr(lookup, "_from_tree", typed)
        assert answers()[:4] == tuple(cold)
        assert counted == {}  # every one read from the cache

        main = next(s.address for s in ElfFile(c_dropped_gcc).function_symbols()
                    if s.name == "main")
        wrong = {("inlined", "v1"): {"atoi": [761]}, ("inlined-names", "v1"): {"atoi": ["1"]},
                 ("types", "complete"): {"int": 60}, ("cfa-rule", f"{main:#x}"): {
                     "rule": ["rzz", 8]}}
        for (kind, key), value in wrong.items():
            path = cache._path(bid, kind, key)
            assert path.is_file(), kind
            path.write_bytes(_entry(key, value))
        assert answers()[:4] == tuple(cold)
        assert counted == {"inlined_index": 1, "names_at": 1, "types": 1, "_cfa_rule": 1}


class TestInspectAnswers:
    def test_read_back_when_they_fit_computed_again_when_not(
            self, where: Path, monkeypatch: pytest.MonkeyPatch, c_layouts: Path) -> None:
        binary = str(c_layouts)
        asks: dict[str, tuple[str, Callable[[], Any]]] = {
            "struct": ("struct flags", lambda: inspect.struct_layout(binary, "struct flags")),
            "vars": ("with_job", lambda: inspect.function_vars(binary, "with_job")),
            "funcs": ("all", lambda: inspect.function_list(binary, "w*")),
            "lines": ("with_job", lambda: inspect.function_lines(binary, "with_job")),
            "line-vars": ("with_job:104", lambda: inspect.line_vars(binary, "with_job:104")),
        }
        assert set(asks) == set(answers.SHAPES)
        cold = {kind: ask() for kind, (_key, ask) in asks.items()}
        for kind, answer in cold.items():
            RENDER[kind](answer)

        opened = _counted(monkeypatch, reader, "Dwarf")
        inspect.close()  # as a new process: nothing open
        assert {kind: ask() for kind, (_key, ask) in asks.items()} == cold
        assert opened == []  # every answer read from the cache

        elf = ElfFile(binary)
        bid = debuginfo.cache_id(elf, debuginfo.locate(elf))
        for kind, (key, ask) in asks.items():
            path = cache._path(bid, kind, key)
            stored = json.loads(path.read_bytes().splitlines()[-1])["value"]
            for n, damage in enumerate(_damages(kind, stored)):
                cache.settle()  # the answer made again is written by now, not after this
                path.write_bytes(_entry(key, damage))
                before = len(opened)
                inspect.close()
                got = ask()
                assert got == cold[kind], (kind, n)
                assert len(opened) == before + 1, (kind, n)
                RENDER[kind](got)


def _damages(kind: str, v: Any) -> list[Any]:
    """Values of the wrong shape for each answer, each of which would crash its table
    (or be shown wrong) if it were used."""
    def edit(fn: Callable[[Any], None]) -> Any:
        copy = json.loads(json.dumps(v))
        fn(copy)
        return copy

    if kind == "funcs":
        return [[{"name": "with_job", "address": "4688", "size": 1, "inlined": 0}],
                [{"name": None, "address": 1, "size": 1, "inlined": 0}], {"rows": []},
                [{**v[0], "extra": 1}], "text"]
    common = [None, "text", [], {}, edit(lambda c: c.update(extra=1))]
    if kind == "struct":
        def half_bitfield(c: Any) -> None:
            m = next(m for m in c["members"] if "bit_size" in m)
            del m["bit_offset"]
        return [*common, edit(half_bitfield),
                edit(lambda c: c["members"][0].update(offset="0")),
                edit(lambda c: c.pop("members")), edit(lambda c: c.update(size=None))]
    if kind == "vars":
        return [*common, edit(lambda c: c["params"][0].update(location=[{"memory": {}}])),
                edit(lambda c: c.update(address="0x1000")),
                edit(lambda c: c["params"][0].pop("source"))]
    if kind == "lines":
        return [*common, edit(lambda c: c["lines"][0].update(line="104")),
                edit(lambda c: c["lines"][0].update(sites=[{"address": "0x1"}])),
                edit(lambda c: c.pop("copies"))]
    return [*common, edit(lambda c: c["sites"][0]["vars"][0].update(location=[{"reg": 5}])),
            edit(lambda c: c["sites"][0].update(file=None)), edit(lambda c: c.pop("sites"))]


class TestFileDigests:
    """A file's digest is hashed once per version of it and kept; a change of its bytes,
    even with its size and modification time put back, is another version."""

    def test_kept_until_the_file_changes(self, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path / "cache"))
        f = tmp_path / "bin"
        f.write_bytes(b"A" * 4096)
        hashed = _counted(monkeypatch, files, "digest")
        first = cache.fingerprint(f)
        cache._digest.cache_clear()  # as a new process
        assert cache.fingerprint(f) == first and len(hashed) == 1
        st = f.stat()
        with open(f, "r+b") as w:  # the same size, the same modification time
            w.write(b"B")
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
        cache._digest.cache_clear()
        assert f.stat().st_mtime_ns == st.st_mtime_ns and f.stat().st_size == st.st_size
        assert cache.fingerprint(f) != first and len(hashed) == 2
        assert cache.fingerprint(f) == _pieces_digest(b"B" + b"A" * 4095, files.PIECE)

    @pytest.mark.parametrize("threads", [1, 2, 3, 4])
    @pytest.mark.parametrize("size", [0, 1, 1023, 1024, 1025, 5 * 1024 + 7])
    def test_the_digest_of_pieces_whatever_the_threads(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int,
            size: int) -> None:
        """Hashed in pieces by several threads, the digest is that of the pieces in
        order, however many threads hashed them (a file of many pieces, each a size
        around the edges of a piece)."""
        monkeypatch.setattr(files, "PIECE", 1024)
        monkeypatch.setattr(files.cpus, "usable", lambda most: min(threads, most))
        f = tmp_path / "bin"
        data = os.urandom(size)
        f.write_bytes(data)
        assert files.digest(f) == _pieces_digest(data, 1024)

    def test_a_file_that_cannot_be_read_is_an_os_error(self, tmp_path: Path) -> None:
        """Nothing but a regular file is hashed (a directory or a pseudo-file says size
        0 or anything), and the error names the file."""
        with pytest.raises(IsADirectoryError, match=str(tmp_path)):
            files.digest(tmp_path)
        with pytest.raises(OSError, match="not a regular file"):
            files.digest("/dev/null")

    def test_a_failing_thread_fails_the_digest_and_none_is_left(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A piece that cannot be read in any thread is the digest's error, never a
        digest without it; every thread is gone when it raises; and when no thread can
        start, this one hashes every piece."""
        monkeypatch.setattr(files, "PIECE", 1024)
        monkeypatch.setattr(files.cpus, "usable", lambda most: 3)
        f = tmp_path / "bin"
        data = os.urandom(10 * 1024 + 5)
        f.write_bytes(data)
        real = os.preadv

        def failing(fd: int, bufs: list[memoryview], at: int) -> int:
            if at == 4 * 1024:  # a helper's second piece
                raise MemoryError("no memory for this piece")
            return real(fd, bufs, at)

        monkeypatch.setattr(files.os, "preadv", failing)
        before = threading.active_count()
        with pytest.raises(MemoryError):
            files.digest(f)
        assert threading.active_count() == before
        monkeypatch.setattr(files.os, "preadv", real)

        def cannot_start(self: threading.Thread) -> None:
            raise RuntimeError("can't start new thread")

        monkeypatch.setattr(files.threading.Thread, "start", cannot_start)
        assert files.digest(f) == _pieces_digest(data, 1024)


def _pieces_digest(data: bytes, piece: int) -> str:
    """The file digest computed here alone: SHA-512 of the pieces' SHA-512s and the
    size."""
    parts = b"".join(hashlib.sha512(data[i:i + piece]).digest()
                     for i in range(0, len(data), piece))
    return hashlib.sha512(parts + len(data).to_bytes(8, "little")).hexdigest()[:16]


def _counted(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[int]:
    """``owner.name`` replaced by itself counting its calls: one item per call."""
    calls: list[int] = []
    real = getattr(owner, name)

    def counting(*a: Any, **k: Any) -> Any:
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(owner, name, counting)
    return calls


def test_a_change_to_any_module_keeps_no_answer_of_the_code_before(tmp_path: Path) -> None:
    """Cached answers are kept under a stamp of noop's code: a change to any of its
    modules (the readers of binaries, the presets' rules in their subpackages, the
    spec's parser: wherever they are and whatever the package is called), to the walk
    in C or to the extension built from it makes it another stamp, so no answer of the
    code before is given out."""
    import shutil

    agent = Path(cache.__file__).resolve().parent
    copy = tmp_path / "agent"
    shutil.copytree(agent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    modules = sorted(copy.rglob("*.py"))
    assert {p.parent.relative_to(copy).parts[:1] for p in modules} >= {
        ("binary",), ("plan",), ("config",), ("live",), ("kernel",)}
    walk = copy / "binary" / "dwarf"
    (walk / "_walk.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")  # as built
    modules += [walk / "_walk.c", walk / "_walk.cpython-311-x86_64-linux-gnu.so"]
    seen = {cache._code_stamp(copy)}
    for module in modules:
        module.write_text(module.read_text() + "\n")
        stamp = cache._code_stamp(copy)
        assert stamp not in seen, f"{module.relative_to(copy)} is not in the stamp"
        seen.add(stamp)
    assert cache._code_stamp(agent) == cache._SCHEMA

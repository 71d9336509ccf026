"""Name handling: Rust legacy demangling and "did you mean" suggestions."""

import pytest

from agent.errors import NotFound, nearest
from agent.target.demangle import demangle_rust_legacy


@pytest.mark.parametrize(("symbol", "plain"), [
    ("_ZN1m6shapes1P3get17h63cb5a0094254cadE", "m::shapes::P::get"),
    ("_ZN4core3fmt9Arguments6new_v117h0123456789abcdefE", "core::fmt::Arguments::new_v1"),
    ("_ZN58_$LT$alloc..string..String$u20$as$u20$core..fmt..Debug$GT$3fmt17h0123456789abcdefE",
     "<alloc::string::String as core::fmt::Debug>::fmt"),
    ("main", None),
    ("_ZN3foo3barE", None),  # no hash: C++, not Rust
    ("_RNvCs1234_5crate4main", None),  # v0 scheme: left to DWARF
])
def test_demangle(symbol: str, plain: str | None) -> None:
    assert demangle_rust_legacy(symbol) == plain


def test_nearest_prefers_the_full_name_the_user_shortened() -> None:
    pool = ["github.com/prometheus/client_golang/prometheus.(*gauge).Add",
            "time.Time.Add", "net/url.Values.Add"]
    assert nearest("prometheus.(*gauge).Add", pool)[0] == pool[0]


def test_not_found_names_what_and_suggests() -> None:
    err = NotFound("type", "main.Ordr", ["main.Order", "main.Item"])
    assert str(err) == "type 'main.Ordr' not found (did you mean main.Order?)"

"""Name handling: Rust demangling (legacy and v0, against llvm-cxxfilt on a real
binary's symbols) and "did you mean" suggestions."""

import subprocess
from pathlib import Path

import pytest

from agent.binary.demangle import demangle, demangle_rust_legacy
from agent.errors import NotFound, nearest


@pytest.mark.parametrize(("symbol", "plain"), [
    ("_ZN1m6shapes1P3get17h63cb5a0094254cadE", "m::shapes::P::get"),
    ("_ZN4core3fmt9Arguments6new_v117h0123456789abcdefE", "core::fmt::Arguments::new_v1"),
    ("_ZN58_$LT$alloc..string..String$u20$as$u20$core..fmt..Debug$GT$3fmt17h0123456789abcdefE",
     "<alloc::string::String as core::fmt::Debug>::fmt"),
    ("main", None),
    ("_ZN3foo3barE", None),  # no hash: C++, not Rust
    ("_RNvCs1234_5crate4main", None),  # v0: not the legacy scheme
    ("_ZN3std2rt10lang_start28_$u7b$$u7b$closure$u7d$$u7d$17h3f7dabec4192973fE"
     ".llvm.9415936792648758129", "std::rt::lang_start::{{closure}}"),
])
def test_demangle_legacy(symbol: str, plain: str | None) -> None:
    assert demangle_rust_legacy(symbol) == plain


@pytest.mark.parametrize(("symbol", "plain"), [
    ("_RNvCs6FjgIYWtyp0_3std4main", "std::main"),
    ("_RNvMs_NtCs4X4t9plMPHF_4core3fmtNtB4_9Formatter3pad", "<core::fmt::Formatter>::pad"),
    ("_RINvNtCsgEmfK2I1SDS_4core3ptr13drop_in_placeNtNtCslNYArtu3iFV_5alloc6string6StringEB4_",
     "core::ptr::drop_in_place::<alloc::string::String>"),
    ("_RNCNvCs1234_5crate4main0B3_", "crate::main::{closure#0}"),
    ("_RNvXs_Cs1234_5crateNtB4_6LedgerNtNtCs5678_4core3fmt5Debug3fmt",
     "<crate::Ledger as core::fmt::Debug>::fmt"),
    ("_RNvCs1234_5crate4main.llvm.123", "crate::main"),
    ("_RNvCs1234_5crate4USED.0", "crate::USED (.0)"),
    ("_RNvCs1234_5crate1m", "crate::m"),
    ("_RNvCs1234_5crate4m", None),  # the identifier runs past the end
    ("_R", None),
    ("_RNvCs1234_5crate", None),  # cut short
    ("_RNvB9_4main", None),  # a back-reference forward
    ("main", None),
])
def test_demangle_v0(symbol: str, plain: str | None) -> None:
    assert demangle(symbol) == plain


def test_demangle_v0_like_llvm_cxxfilt(rust_ledger: Path) -> None:
    """Every v0 symbol of a Rust program (the standard library's: generics, impls,
    closures, dyn types with higher-ranked lifetimes) as llvm-cxxfilt prints it."""
    nm = subprocess.run(["nm", str(rust_ledger)], capture_output=True, text=True,
                        check=True, timeout=60).stdout
    symbols = sorted({line.split()[-1] for line in nm.splitlines()
                      if line.split()[-1].startswith("_R")})
    assert len(symbols) > 300
    oracle = subprocess.run(["llvm-cxxfilt"], input="\n".join(symbols), capture_output=True,
                            text=True, check=True, timeout=60).stdout.splitlines()
    assert [demangle(s) for s in symbols] == oracle


def test_nearest_prefers_the_full_name_the_user_shortened() -> None:
    pool = ["github.com/prometheus/client_golang/prometheus.(*gauge).Add",
            "time.Time.Add", "net/url.Values.Add"]
    assert nearest("prometheus.(*gauge).Add", pool)[0] == pool[0]


def test_not_found_names_what_and_suggests() -> None:
    err = NotFound("type", "main.Ordr", ["main.Order", "main.Item"])
    assert str(err) == "type 'main.Ordr' not found (did you mean main.Order?)"

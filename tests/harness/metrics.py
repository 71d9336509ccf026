"""Reading /metrics: noop's and the targets' own, parsed the same way for both."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def get(url: str, **kw: object) -> str:
    """The body at ``url``; an HTTP error raises."""
    with urllib.request.urlopen(url, timeout=5, **kw) as r:  # type: ignore[arg-type]
        return str(r.read().decode())


def fetch(url: str) -> tuple[int, str]:
    """The status and body at ``url``, an HTTP error's too; 0 and why while nothing
    answers there (not listening yet)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)


def samples(text: str) -> Samples:
    """Every sample of an exposition, by (name, sorted labels)."""
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def one(got: Samples, name: str, **labels: str) -> float:
    """The sample ``name{labels}``: a KeyError when there is none."""
    return got[(name, tuple(sorted(labels.items())))]


def scrape(url: str) -> dict[str, float]:
    """A target's /metrics by series as written (``name{k="v",...}``)."""
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^([a-z_]+(?:\{[^}]*\})?) (\S+)$", text, re.M)}


def series_name(metric: str, labels: dict[str, str]) -> str:
    """A series as ``scrape`` keys it."""
    if not labels:
        return metric
    return metric + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"

"""The deployment manifests as the tests read them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def documents(path: Path) -> list[dict[str, Any]]:
    """Every non-empty YAML document of ``path``."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def patched(obj: Any, patch: Any) -> Any:
    """``obj`` with a strategic merge patch applied, as `kubectl patch` does for the
    fields deploy/kubernetes' patches touch: maps merge key by key, a list of objects
    with names merges element by name, any other value (lists of strings included)
    is replaced."""
    if isinstance(obj, dict) and isinstance(patch, dict):
        out = dict(obj)
        for key, value in patch.items():
            out[key] = patched(obj[key], value) if key in obj else value
        return out
    if (isinstance(obj, list) and isinstance(patch, list)
            and all(isinstance(x, dict) and "name" in x for x in [*obj, *patch])):
        by_name = {x["name"]: x for x in patch}
        merged = [patched(x, by_name.pop(x["name"])) if x["name"] in by_name else x
                  for x in obj]
        return merged + list(by_name.values())
    return patch

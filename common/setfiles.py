"""Where parameter-set files live and how one is read: the I/O edge of tparams.setfile.

The lab (its servers' sets), the captures (--as-set) and qreplay (--set) all
use this one place, so a set file means the same to each of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tparams.errors import ToolError
from tparams.paramset import ParamSet
from tparams.setfile import paramset_from_document

SETS_DIR = Path(__file__).resolve().parent.parent / "datasets" / "sets"


def read_set_document(path: Path) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ToolError(f"cannot read set file {path}: {exc}") from None


def builtin_set(name: str, sets_dir: Path = SETS_DIR) -> ParamSet:
    """A set of datasets/sets by name (alpha, beta, chrome-109, ...)."""
    return paramset_from_document(read_set_document(sets_dir / f"{name}.json"))

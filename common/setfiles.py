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
    """A set file's JSON object. A set file is one JSON document: a damaged or cut-short one holds no set
    that can be trusted, so it is refused in one line that says at which byte it stops being readable."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ToolError(f"cannot read set file {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(f"set file {path} is damaged: no UTF-8 at byte {exc.start:,} of {len(data):,}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        at = len(text[: exc.pos].encode())
        cut = " (the file ends there: cut short?)" if not text[exc.pos :].strip() else ""
        raise ToolError(f"set file {path} is damaged at byte {at:,} of {len(data):,}{cut}: {exc.msg}") from None
    if not isinstance(document, dict):
        raise ToolError(f"set file {path} holds a JSON {type(document).__name__}, not an object with a set's parameters")
    return document


def builtin_set(name: str, sets_dir: Path = SETS_DIR) -> ParamSet:
    """A set of datasets/sets by name (alpha, beta, chrome-109, ...)."""
    return paramset_from_document(read_set_document(sets_dir / f"{name}.json"))

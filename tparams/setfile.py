"""Parameter-set documents: the replayable, shareable form of a ParamSet.

A document is plain JSON (schema: schemas/paramset.schema.json). Reading and
writing files is the callers' business; this module only converts, so that
a notebook, the scanner and qreplay agree on one format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from tparams.paramset import PERFORMANCE_PARAMETERS, ParamSet, ParamSetError

Role = Literal["client", "server"]
FORMAT_VERSION = 1


def document_for(
    name: str,
    role: Role,
    params: ParamSet,
    provenance: Mapping[str, Any],
    description: str = "",
    extra_parameters: list[tuple[int, bytes]] | None = None,
) -> dict[str, Any]:
    """A document for ``params``; parameters that were not sent are left out."""
    document: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "name": name,
        "role": role,
        "description": description,
        "provenance": dict(provenance),
        "parameters": {k: v for k, v in params.as_sent().items() if v is not None},
    }
    if extra_parameters:
        document["extra_parameters"] = [{"id": pid, "hex": raw.hex()} for pid, raw in extra_parameters]
    return document


def paramset_from_document(document: Mapping[str, Any]) -> ParamSet:
    if not isinstance(document, Mapping) or not isinstance(document.get("parameters"), Mapping):
        raise ParamSetError("a parameter-set document needs a 'parameters' object")
    if document.get("role") not in ("client", "server"):
        raise ParamSetError(f"set {document.get('name')!r}: role must be 'client' or 'server'")
    return ParamSet.from_mapping(document["parameters"])


def describe(params: ParamSet) -> str:
    """One line, e.g. for a CLI banner: only what is sent."""
    return ", ".join(f"{k}={v}" for k, v in params.as_sent().items() if v is not None) or "(nothing sent)"


__all__ = ["PERFORMANCE_PARAMETERS", "document_for", "paramset_from_document", "describe"]

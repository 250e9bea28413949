"""The checkpoint registry's file format, read the one way (ssl_pretrain.registry keeps the file;
analysis.report reads it for Table 3 without importing the training packages).

``{"checkpoints": [{name, path, kind, hours, male_pct, female_pct, unknown_pct, updates, ...}]}``:
every entry is checked against ``Entry`` -- a name that may become a file name, a path of the kind
it claims, finite numbers in range -- and a name is given once (two entries of one name would
leave which model a result belongs to to chance), so a hand-edited fact fails in one line instead
of printing in a published table.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, field_validator

from corpora.base.boundary import check_name, finite, printable, read_json
from corpora.base.errors import UserError

KIND_SUFFIX = {"fairseq": ".pt", "packed": ".safetensors"}   # an hf entry is a folder


def _finite(v, lo, hi):
    """None, or a number within [lo, hi] (boundary.finite's rule; a string or bool is not a number here)."""
    if v is not None:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError("must be a number")
        try:
            finite(v, "value", lo=lo, hi=hi)
        except UserError:
            raise ValueError(f"must be a finite number in [{lo}, {hi}]") from None
    return v


class Entry(BaseModel):
    """One registered checkpoint as the registry file must hold it: read as data, every fact checked
    (a number in a Table 3 row comes from here)."""
    model_config = ConfigDict(extra="allow", strict=True)
    name: str
    path: str
    kind: Literal["fairseq", "packed", "hf"]
    hours: Optional[float] = None
    male_pct: Optional[float] = None
    female_pct: Optional[float] = None
    unknown_pct: Optional[float] = None
    updates: Optional[int] = None
    parameters: Optional[int] = None
    layers: Optional[int] = None
    hidden_size: Optional[int] = None
    sample_rate: Optional[int] = None
    manifest: Optional[str] = None
    note: str = ""

    @field_validator("hours", mode="before")
    @classmethod
    def _hours(cls, v):
        return _finite(v, 0, 1e8)

    @field_validator("male_pct", "female_pct", "unknown_pct", mode="before")
    @classmethod
    def _pct(cls, v):
        return _finite(v, 0, 100)

    @field_validator("updates", "parameters", "layers", "hidden_size", "sample_rate", mode="before")
    @classmethod
    def _count(cls, v):
        return _finite(v, 0, 1e15)

    @field_validator("path", "manifest")
    @classmethod
    def _path(cls, v):
        if v is not None and (not v.strip() or "\x00" in v):
            raise ValueError("must be a non-empty path")
        return v


class _File(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    checkpoints: list[Entry] = []



def read_registry(path, fix: str) -> list[dict]:
    """The registry's entries as stored (only the keys the file has), each checked."""
    data = read_json(path, "checkpoint registry", shape=_File, fix=fix)
    seen: set[str] = set()
    for e in data.checkpoints:
        check_name(e.name, "checkpoint name", path=path)
        if e.name in seen:   # a lookup by name would take one and a table print both: which model is which?
            raise UserError(f"the registry holds two entries named {printable(e.name)!r}", path=path,
                            fix="keep one entry per name (rename or remove the other)")
        seen.add(e.name)
        suffix = KIND_SUFFIX.get(e.kind)
        if suffix and not e.path.endswith(suffix):
            raise UserError(f"the registry's entry {e.name!r} is a {e.kind} checkpoint whose path does not end in "
                            f"{suffix}: '{printable(e.path)[:80]}'", path=path, fix=fix)
    return [e.model_dump(exclude_unset=True) for e in data.checkpoints]

"""Provenance sidecars: `<artifact>.provenance.json` beside a managed artifact says who wrote it
(the agent, through `extension_manage`), in which operation, the digest it wrote, and when the
change takes effect. A user artifact without one predates management ("legacy")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .layers import ArtifactError, read_inside
from .report import Provenance

SUFFIX = ".provenance.json"
MAX_SIDECAR_BYTES = 16 * 1024


class ProvenanceRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built at first use: most sessions never make one

    origin: Literal["agent"]
    operation_id: str = Field(min_length=1, max_length=100)
    digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    activation: Literal["next_turn"] = "next_turn"
    kind: str = Field(min_length=1, max_length=40)


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + SUFFIX)


def read_provenance(path: Path, boundary: Path) -> tuple[Provenance, ProvenanceRecord | None]:
    """The provenance state of the artifact at `path`: "legacy" without a sidecar, "agent" with a
    valid one, "unknown" when the sidecar cannot be read or understood."""
    try:
        data = read_inside(sidecar(path), boundary, MAX_SIDECAR_BYTES)
    except ArtifactError:
        return "unknown", None
    if data is None:
        return "legacy", None
    try:
        return "agent", ProvenanceRecord.model_validate(json.loads(data.decode("utf-8")))
    except (UnicodeDecodeError, json.JSONDecodeError, ValidationError):
        return "unknown", None

"""grep called in this process, its answer read as the broker reads it (the matches joined from
the columns the servicer sends them in)."""

from __future__ import annotations

from typing import Any

from osprey.toolservice.wire import GrepResult
from osprey_sidecar import search


def grep(*args: Any, **kwargs: Any) -> GrepResult:
    """`osprey_sidecar.search.grep`, its answer as the broker's GrepResult."""
    return GrepResult.from_wire(search.grep(*args, **kwargs))

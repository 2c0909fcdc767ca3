"""grep's answer on the wire: the matches as columns, joined into the broker's GrepResult."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_search_engines import require_rg, write

from osprey.errors import ToolError
from osprey.toolservice.wire import GrepResult
from osprey_sidecar import search
from osprey_sidecar._proto import tools_pb2 as pb
from osprey_sidecar.paths import Roots


def test_columns_are_joined_into_matches_with_each_path_sent_once() -> None:
    message = pb.GrepResponse(
        paths=["a.py", "src/b.py"], match_paths=[0, 0, 1], match_lines=[3, 9, 1], match_texts=["x = 1", "y", "needle()"],
        truncated=True, total=40, engine="ripgrep",
    )
    r = GrepResult.from_wire(pb.GrepResponse.FromString(message.SerializeToString()))
    assert [(m.path, m.line, m.text) for m in r.matches] == [("a.py", 3, "x = 1"), ("a.py", 9, "y"), ("src/b.py", 1, "needle()")]
    assert (r.truncated, r.total, r.engine) == (True, 40, "ripgrep")
    assert GrepResult.from_wire(pb.GrepResponse(engine="python")).matches == []


def test_an_answer_with_a_message_per_match_is_still_read() -> None:
    r = GrepResult.from_wire(pb.GrepResponse(matches=[pb.GrepMatch(path="a.py", line=3, text="x")], total=1, engine="python"))
    assert [(m.path, m.line, m.text) for m in r.matches] == [("a.py", 3, "x")]


@pytest.mark.parametrize(
    "columns",
    [
        {"paths": ["a.py"], "match_paths": [0, 1], "match_lines": [1, 2], "match_texts": ["x", "y"]},  # a path not sent
        {"paths": ["a.py"], "match_paths": [-1], "match_lines": [1], "match_texts": ["x"]},
        {"paths": ["a.py"], "match_paths": [0, 0], "match_lines": [1], "match_texts": ["x", "y"]},  # columns of other lengths
        {"paths": [], "match_paths": [0], "match_lines": [1], "match_texts": ["x"]},
    ],
)
def test_columns_that_do_not_agree_are_refused(columns: dict[str, list[object]]) -> None:
    with pytest.raises(ToolError) as info:
        GrepResult.from_wire(pb.GrepResponse(total=2, engine="ripgrep", **columns))  # type: ignore[arg-type]
    assert info.value.category == "io_error" and "malformed" in info.value.message


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
def test_the_servicer_sends_columns_only(tmp_path: Path, engine: str) -> None:
    if engine == "ripgrep":
        require_rg()
    write(tmp_path, "a.txt", "needle 1\nneedle 2\n")
    write(tmp_path, "d/b.txt", "x\nneedle 3\n")
    r = search.grep(Roots([str(tmp_path)]), "needle", engine=engine)
    assert not r.matches
    assert (list(r.paths), list(r.match_paths), list(r.match_lines), list(r.match_texts)) == (
        ["a.txt", "d/b.txt"], [0, 0, 1], [1, 2, 2], ["needle 1", "needle 2", "needle 3"],
    )

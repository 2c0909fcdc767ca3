"""A tool argument that cannot be sent as UTF-8 (a lone surrogate, as half an emoji from a model or
an undecodable file name) is the caller's `invalid_argument` naming the field, in both homes: never
a raw UnicodeEncodeError, and nothing is written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import fails

from osprey.toolservice.client import ToolClient

BAD = "caf\udce9.txt"


async def test_every_call_names_the_field_it_cannot_send(tools: ToolClient, workspace: Path) -> None:
    (workspace / "f.txt").write_text("hello\n")
    for call, field in [
        (tools.read_file(BAD), "path"),
        (tools.write_file(BAD, "x"), "path"),
        (tools.write_file("f.txt", "half \ud83d emoji"), "content"),
        (tools.edit_file("f.txt", "hello", "\udce9"), "new string"),
        (tools.grep("hel\udce9"), "pattern"),
        (tools.find_files("*", path=BAD), "path"),
        (tools.list_directory(BAD), "path"),
        (tools.tree(BAD), "path"),
        (tools.bash("echo \udce9"), "command"),
        (tools.exec(["echo", "\udce9"]), "argv"),
    ]:
        error = await fails(call, "invalid_argument")
        assert f"the {field} is not valid Unicode text" in str(error) and "lone surrogate" in str(error), (field, str(error))
    assert sorted(os.listdir(workspace)) == ["f.txt"] and (workspace / "f.txt").read_text() == "hello\n"


@pytest.mark.parametrize("size", [10, 3 * 1024 * 1024], ids=["one-message", "streamed"])
async def test_content_that_cannot_be_sent_writes_nothing(tools: ToolClient, workspace: Path, size: int) -> None:
    (workspace / "f.txt").write_text("before\n")
    await fails(tools.write_file("f.txt", "x" * size + "\ud800" + "y"), "invalid_argument")
    assert (workspace / "f.txt").read_text() == "before\n"

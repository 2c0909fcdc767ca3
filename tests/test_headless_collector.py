"""A headless run keeps the cyclic garbage collector off while it starts, then turns it back on,
with what start-up made frozen out of its scans; a run that fails to start turns it back on too."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from osprey.headless import run_headless
from osprey.testing.model_server import ModelServer, Reply


@pytest.fixture(autouse=True)
def collector(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("OSPREY_HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.enable()


def test_the_collector_is_on_after_a_run_and_start_up_is_frozen(tmp_path: Path) -> None:
    with ModelServer([Reply.text("done")]) as server:
        options = {"cwd": str(tmp_path), "provider": "openai", "model": "test-model", "base_url": server.base_url, "events_jsonl": True}
        status = run_headless("Say done.", options)
    assert status == 0  # the task completed
    server.assert_clean()
    assert gc.isenabled() and gc.get_freeze_count() > 0


def test_the_collector_is_on_after_a_run_that_cannot_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = run_headless("Say done.", {"cwd": str(tmp_path / "missing"), "provider": "openai", "model": "m"})
    assert status == 1 and "does not exist" in capsys.readouterr().err
    assert gc.isenabled()

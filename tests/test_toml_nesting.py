"""Every TOML file Osprey reads is parsed with bounded nesting: a few KB of brackets give a clear
error naming the file, never a RecursionError traceback; a project file that cannot be read is
skipped with a warning, so Osprey still runs in a repository that ships one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomli

from osprey import tomlfile
from osprey.config import load_settings
from osprey.errors import ConfigError
from osprey.extensions.discovery import discover
from osprey.policy.store import ApprovalStore
from osprey.testing.model_server import ModelServer, Reply
from osprey.trust import load_trust

OSPREY = str(Path(sys.executable).with_name("osprey"))

DEEP = {
    "arrays": "a = " + "[" * 3000 + "]" * 3000 + "\n",
    "inline tables": "a = " + "{b = " * 3000 + "1" + "}" * 3000 + "\n",
    "dotted keys": "[" + ".".join(["t"] * (tomlfile.MAX_NESTING + 2)) + "]\nx = 1\n",
    "unclosed": "a = " + "[" * 5000 + "\n",
}


@pytest.mark.parametrize("text", DEEP.values(), ids=list(DEEP))
def test_deep_nesting_is_a_decode_error(text: str) -> None:
    with pytest.raises(tomli.TOMLDecodeError, match="nested more than"):
        tomlfile.loads(text)


def test_ordinary_nesting_still_parses() -> None:
    assert tomlfile.loads('[a.b.c]\nd = [[1, 2], [{e = "f"}]]\n') == {"a": {"b": {"c": {"d": [[1, 2], [{"e": "f"}]]}}}}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home" / ".osprey"
    h.mkdir(parents=True)
    return h


def env_for(home: Path) -> dict[str, str]:
    return {"OSPREY_HOME": str(home), "HOME": str(home.parent), "OPENAI_API_KEY": "k"}


def test_a_deep_global_config_names_the_file(workspace: Path, home: Path) -> None:
    (home / "config.toml").write_text(DEEP["arrays"])
    with pytest.raises(ConfigError, match="nested more than") as err:
        load_settings(workspace, {}, env_for(home))
    assert str(home / "config.toml") in str(err.value)


@pytest.mark.parametrize("text", [DEEP["arrays"], "model = \n", b"\xff\xfe".decode("latin-1")], ids=["deep", "invalid", "not-utf8"])
def test_a_project_config_that_cannot_be_read_is_skipped_with_a_warning(workspace: Path, home: Path, text: str) -> None:
    (workspace / ".git").mkdir()
    project = workspace / ".osprey"
    project.mkdir()
    (project / "config.toml").write_bytes(text.encode("latin-1") if text.startswith("\xff") else text.encode())
    (home / "config.toml").write_text('model = "from-home"\n')
    settings = load_settings(workspace, {}, env_for(home))
    assert settings.model == "from-home"
    assert any(str(project / "config.toml") in w and "skipped" in w for w in settings.warnings), settings.warnings


def test_deep_approvals_and_trust_files_are_reported_not_raised(home: Path) -> None:
    warned: list[str] = []
    (home / "approvals.toml").write_text(DEEP["inline tables"])
    store = ApprovalStore.for_home(home, warn=warned.append)
    assert store.load() == []
    assert warned and "nested more than" in warned[0] and "approvals.toml" in warned[0]
    (home / "trust.toml").write_text(DEEP["arrays"])
    trust = load_trust(home)
    assert trust.problem is not None and "nested more than" in trust.problem and "trust.toml" in trust.problem


def test_deep_project_extension_files_are_left_out_and_the_rest_loads(workspace: Path, home: Path) -> None:
    (workspace / ".git").mkdir()
    project = workspace / ".osprey"
    (project / "tools").mkdir(parents=True)
    for name in ("hooks.toml", "toolsets.toml", "tool-descriptions.toml", "tools/deep.toml"):
        (project / name).write_text(DEEP["arrays"])
    settings = load_settings(workspace, {}, env_for(home))
    found = discover(settings, ["read_file", "bash"])
    reasons = {Path(a.path).name: (a.status, a.reason or "") for a in found.artifacts}
    for name in ("hooks.toml", "toolsets.toml", "tool-descriptions.toml", "deep.toml"):
        status, reason = reasons[name]
        assert status != "loaded" and "nested more than" in reason, (name, status, reason)


def test_osprey_runs_in_a_repository_with_deep_files_and_stops_clearly_on_a_deep_global_config(
        workspace: Path, osprey_env: dict[str, str], model_server: ModelServer) -> None:
    (workspace / ".git").mkdir()
    project = workspace / ".osprey"
    project.mkdir()
    for name in ("config.toml", "hooks.toml", "toolsets.toml"):
        (project / name).write_text(DEEP["arrays"])
    model_server.add(Reply.text("still here"))
    ran = subprocess.run([OSPREY, "agent", "-C", str(workspace), "--base-url", model_server.base_url, "hello"], env=osprey_env,
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert "still here" in ran.stdout and "Traceback" not in ran.stderr
    for name in ("config.toml", "hooks.toml", "toolsets.toml"):
        assert str(project / name) in ran.stderr, (name, ran.stderr)
    (Path(osprey_env["OSPREY_HOME"]) / "config.toml").write_text(DEEP["inline tables"])
    failed = subprocess.run([OSPREY, "agent", "-C", str(workspace), "hello"], env=osprey_env, capture_output=True, text=True,
                            timeout=60)
    assert failed.returncode == 1, (failed.returncode, failed.stderr)  # a configuration error, as for any bad config file
    assert "Traceback" not in failed.stderr and "config.toml" in failed.stderr and "nested more than" in failed.stderr

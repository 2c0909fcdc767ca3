"""`osprey extensions --json` against a running session: an artifact changed (or created, or newly
trusted) since the session loaded it is `pending_reload`, and `active` again once the session
reloads; a closed or dead session is compared with no longer. And `[extensions]
trust_agent_authored`: parsed, validated, shown, guarded against project layers, governing nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from session_harness import FAST_RETRY, FakeProvider, text

from osprey.config import load_settings
from osprey.errors import ConfigError
from osprey.extensions.discovery import discover
from osprey.extensions.loaded import DIRECTORY, LoadedRecord, record_path
from osprey.extensions.manage import ManageInput, manage
from osprey.session.core import Session, SessionOptions

SCRIPT = "#!/bin/sh\ncat\n"


class Dirs:
    def __init__(self, tmp: Path) -> None:
        self.workspace = tmp / "ws"
        (self.workspace / ".git").mkdir(parents=True)
        self.home = tmp / "home"
        self.home.mkdir()
        self.environ = {"OSPREY_HOME": str(self.home), "OPENAI_API_KEY": "unused", "HOME": str(tmp)}

    def tool(self, layer: Path, name: str) -> Path:
        tools = layer / "tools"
        tools.mkdir(parents=True, exist_ok=True)
        program = tools / "run.sh"
        program.write_text(SCRIPT)
        program.chmod(0o755)
        path = tools / f"{name}.toml"
        path.write_text(f'name = "{name}"\ndescription = "Echoes."\ncommand = ["./run.sh"]\n')
        return path

    def settings(self, **flags: Any) -> Any:
        return load_settings(self.workspace, {"approval_policy": "never", **flags}, self.environ)

    def session(self, script: list[Any]) -> Session:
        settings = self.settings()
        return Session(SessionOptions(settings=settings.model_copy(update={"retry": FAST_RETRY})), emit=lambda _: None,
                       provider=FakeProvider(script))

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("OSPREY_")}, "OSPREY_HOME": str(self.home)}
        return subprocess.run([sys.executable, "-m", "osprey", "extensions", "-C", str(self.workspace), *args], env=env,
                              capture_output=True, text=True, timeout=60)

    def report(self) -> dict[str, Any]:
        run = self.cli("--json")
        assert run.returncode == 0, run.stderr
        data: dict[str, Any] = json.loads(run.stdout)
        return data

    def status(self, report: dict[str, Any], path: Path) -> tuple[str, str | None]:
        [item] = [a for a in report["artifacts"] if a["path"] == str(path)]
        return item["status"], item["reason"]


@pytest.fixture
def dirs(tmp_path: Path) -> Dirs:
    return Dirs(tmp_path)


async def test_a_change_is_pending_until_the_session_reloads(dirs: Dirs) -> None:
    append = dirs.home / "APPEND_SYSTEM.md"
    append.write_text("Answer in English.\n")
    mine = dirs.tool(dirs.home, "mine")
    session = dirs.session([text("one")])
    async with session:
        report = dirs.report()
        assert report["running_sessions"] == [session.session_id]
        assert dirs.status(report, append) == ("active", None)
        assert dirs.status(report, mine) == ("active", None)

        append.write_text("Answer in French.\n")  # the person edits a file
        later = dirs.tool(dirs.home, "later")  # and adds a tool of their own
        report = dirs.report()
        status, reason = dirs.status(report, append)
        assert status == "pending_reload" and reason is not None and session.session_id in reason and "/reload" in reason
        assert dirs.status(report, later)[0] == "pending_reload"
        assert dirs.status(report, mine) == ("active", None)
        plain = dirs.cli()
        assert "pending reload" in plain.stdout and f"compared with what the running session {session.session_id} loaded" in plain.stdout

        assert session.extensions is not None
        session.extensions.request_reload()  # /reload
        await session.submit("go")  # reloads at the turn boundary
        assert "later" in session.tool_names()
        report = dirs.report()
        assert dirs.status(report, append) == ("active", None)
        assert dirs.status(report, later) == ("active", None)
    report = dirs.report()
    assert report["running_sessions"] == []
    assert not record_path(dirs.home, session.session_id).exists()


async def test_an_agent_written_tool_stays_inactive_and_a_newly_trusted_one_is_pending(dirs: Dirs) -> None:
    project_tool = dirs.tool(dirs.workspace / ".osprey", "proj")
    session = dirs.session([])
    async with session:
        assert dirs.status(dirs.report(), project_tool)[0] == "inactive"  # untrusted, in the session as on disk
        outcome, changed = manage(dirs.settings(), ManageInput(operation="create", kind="tool", name="agent_made",
                                                               content='name = "agent_made"\ndescription = "x"\ncommand = ["/bin/cat"]\n'))
        assert changed, outcome.text
        report = dirs.report()
        # a reload would not make it run: it needs trust first, so it is reported as what it is
        assert dirs.status(report, dirs.home / "tools" / "agent_made.toml")[0] == "inactive"
        trusted = dirs.cli("trust", "proj", "--yes")
        assert trusted.returncode == 0, trusted.stderr
        status, reason = dirs.status(dirs.report(), project_tool)
        assert status == "pending_reload" and "loaded it" in (reason or "")  # trusted since the session loaded it


def test_a_record_of_a_process_that_is_gone_is_not_compared_and_is_removed(dirs: Dirs) -> None:
    append = dirs.home / "APPEND_SYSTEM.md"
    append.write_text("Answer in English.\n")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    from osprey.owners import owner_record

    owner = owner_record().split()
    record = LoadedRecord(session_id="gone123", owner=" ".join([dead.stdout.strip(), *owner[1:]]), cwd=str(dirs.workspace),
                          loaded_at=0.0, artifacts=[])
    (dirs.home / DIRECTORY).mkdir()
    record_path(dirs.home, "gone123").write_text(record.model_dump_json())
    report = dirs.report()
    assert report["running_sessions"] == [] and dirs.status(report, append) == ("active", None)
    assert not record_path(dirs.home, "gone123").exists()
    # a malformed record is ignored, never an error
    record_path(dirs.home, "broken").write_text("{not json")
    assert dirs.report()["running_sessions"] == []


def test_trust_agent_authored_is_parsed_shown_and_governs_nothing(dirs: Dirs) -> None:
    assert dirs.settings().extensions.trust_agent_authored is False
    (dirs.home / "config.toml").write_text("[extensions]\ntrust_agent_authored = true\n")
    settings = dirs.settings()
    assert settings.extensions.trust_agent_authored is True
    report = dirs.report()
    assert report["trust_agent_authored"] is True
    assert "[extensions] trust_agent_authored = true (governs no behavior yet" in dirs.cli().stdout
    # an agent-written tool still needs a pin
    outcome, changed = manage(settings, ManageInput(operation="create", kind="tool", name="agent_made",
                                                    content='name = "agent_made"\ndescription = "x"\ncommand = ["/bin/cat"]\n'))
    assert changed, outcome.text
    [entry] = [a for a in discover(settings, ()).artifacts if a.name == "agent_made"]
    assert entry.trust == "untrusted" and entry.status == "inactive"


@pytest.mark.parametrize("value, problem", [('"yes"', "valid boolean"), ("1", "valid boolean"), ('"true"', "valid boolean")])
def test_trust_agent_authored_must_be_a_boolean(dirs: Dirs, value: str, problem: str) -> None:
    (dirs.home / "config.toml").write_text(f"[extensions]\ntrust_agent_authored = {value}\n")
    with pytest.raises(ConfigError, match=f"key 'extensions.trust_agent_authored': .*{problem}"):
        dirs.settings()


def test_an_unknown_extensions_key_is_an_error(dirs: Dirs) -> None:
    (dirs.home / "config.toml").write_text("[extensions]\ntrust_agent_written = true\n")
    with pytest.raises(ConfigError, match="unknown key 'extensions.trust_agent_written'"):
        dirs.settings()


def test_a_project_cannot_turn_it_on_without_trust(dirs: Dirs) -> None:
    project = dirs.workspace / ".osprey" / "config.toml"
    project.parent.mkdir()
    project.write_text("[extensions]\ntrust_agent_authored = true\n")
    settings = dirs.settings()
    assert settings.extensions.trust_agent_authored is False
    assert any("ignored extensions.trust_agent_authored" in w and "trust the tools and hooks the agent writes" in w for w in settings.warnings)
    # turning it off is never loosening: a project may do that untrusted
    (dirs.home / "config.toml").write_text("[extensions]\ntrust_agent_authored = true\n")
    project.write_text("[extensions]\ntrust_agent_authored = false\n")
    settings = dirs.settings()
    assert settings.extensions.trust_agent_authored is False and not any("trust_agent_authored" in w for w in settings.warnings)
    # once the person trusts the project's file, it applies
    project.write_text("[extensions]\ntrust_agent_authored = true\n")
    (dirs.home / "config.toml").unlink()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OSPREY_")}, "OSPREY_HOME": str(dirs.home)}
    trusted = subprocess.run([sys.executable, "-m", "osprey", "trust", str(dirs.workspace), "--yes"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert trusted.returncode == 0, trusted.stderr
    assert dirs.settings().extensions.trust_agent_authored is True

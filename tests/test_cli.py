"""The `osprey` command surface: help, version, usage errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from osprey import __version__


def osprey(*args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).with_name("osprey")), *args], capture_output=True, text=True, timeout=60, **kw)


def test_help_lists_agent_without_importing_it() -> None:
    code = "import sys; from osprey.cli import main\ntry: main(['--help'])\nexcept SystemExit: pass\nprint(sorted(m for m in ('osprey.cli.agent','httpx','grpc','pydantic') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "agent" in out and out.strip().endswith("[]")


def test_agent_help_does_not_import_heavy_modules() -> None:
    code = "import sys; from osprey.cli import main\ntry: main(['agent','--help'])\nexcept SystemExit: pass\nprint(sorted(m for m in ('httpx','grpc','pydantic') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "--max-turns" in out and out.strip().endswith("[]")


def test_version() -> None:
    assert __version__ in osprey("--version").stdout


def test_empty_prompt_is_a_usage_error(tmp_path: Path) -> None:
    run = osprey("agent", "  ", cwd=tmp_path)
    assert run.returncode == 2 and "prompt is empty" in run.stderr


def test_prompt_from_stdin_needs_a_pipe_or_argument(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    run = osprey("agent", "--provider", "replay", cwd=tmp_path, input="", env=osprey_env)
    assert run.returncode == 2 and "prompt is empty" in run.stderr


def test_conflicting_policy_flags(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    run = osprey("agent", "--yolo", "--read-only", "hi", cwd=tmp_path, env=osprey_env)
    assert run.returncode == 2 and "choose one of" in run.stderr


def test_unknown_provider_is_refused(tmp_path: Path) -> None:
    run = osprey("agent", "--provider", "nope", "hi", cwd=tmp_path)
    assert run.returncode == 2 and "nope" in run.stderr


def test_bare_osprey_help_lists_the_subcommands_and_the_tui_options() -> None:
    run = osprey("--help")
    assert run.returncode == 0
    for name in ("agent", "approvals", "docs", "sandbox", "trust"):
        assert f"\n  {name} " in run.stdout
    for option in ("--cwd", "--approval-policy", "--yolo", "--read-only", "--sandbox", "--allow", "--toolset", "--max-turns", "--continue"):
        assert option in run.stdout
    # The options only `osprey agent` has are named as such, and are not the TUI's.
    said = " ".join(run.stdout.split("Options:")[0].split())
    assert "osprey agent alone has --replay, --record, --events-jsonl, --no-journal, --output-schema and --budget" in said
    assert "--budget DURATION" not in run.stdout and "--events-jsonl " not in run.stdout.split("Options:")[1]


def test_agent_keeps_its_own_options() -> None:
    run = osprey("agent", "--help")
    assert run.returncode == 0 and "--max-turns" in run.stdout and "--replay" in run.stdout and "--events-jsonl" in run.stdout
    assert "--toolset" in run.stdout and "--continue" in run.stdout
    assert " ".join(run.stdout.split()).count("(osprey agent only)") == 6


def test_tui_options_before_a_subcommand_are_a_usage_error() -> None:
    run = osprey("--yolo", "agent", "hi")
    assert run.returncode == 2 and "option of the terminal UI" in run.stderr


def test_bare_osprey_config_error_exits_1_before_the_ui(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    env = {k: v for k, v in osprey_env.items() if k != "OPENAI_API_KEY"}
    run = osprey("-C", str(tmp_path), stdin=subprocess.DEVNULL, env=env)
    assert run.returncode == 1 and run.stderr.startswith("osprey: error: OPENAI_API_KEY is not set")
    assert "\x1b[" not in run.stdout  # no screen was drawn


def test_bare_osprey_needs_a_terminal(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    run = osprey("-C", str(tmp_path), stdin=subprocess.DEVNULL, env=osprey_env)
    assert run.returncode == 2 and "needs a terminal" in run.stderr and "osprey agent" in run.stderr

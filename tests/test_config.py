"""Settings resolution: precedence, .env, and clear errors for bad files and keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from osprey.config import find_project_configs, load_settings, parse_dotenv
from osprey.errors import ConfigError


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home" / ".osprey"
    h.mkdir(parents=True)
    return h


def env_for(home: Path, **extra: str) -> dict[str, str]:
    return {"OSPREY_HOME": str(home), "HOME": str(home.parent), "OPENAI_API_KEY": "k", **extra}


def test_defaults(workspace: Path, home: Path) -> None:
    s = load_settings(workspace, {}, env_for(home))
    assert (s.provider, s.model, s.max_turns, s.approval_policy) == ("openai", "gpt-4.1", 150, "deny-untrusted")
    assert s.base_url == "https://api.openai.com/v1"
    assert s.tool_results.max_chars == 50_000
    assert s.retry.delays == [1.0, 5.0, 15.0] and s.retry.max_retries == 3 and s.retry.turn_timeout == 300


def test_precedence_global_project_env_flags(workspace: Path, home: Path) -> None:
    (home / "config.toml").write_text('model = "global"\nmax_turns = 5\n[retry]\ndelays = [2.0]\nturn_timeout = 9\n')
    project = workspace / ".osprey"
    project.mkdir()
    (project / "config.toml").write_text('model = "project"\n[retry]\nturn_timeout = 7\n')
    (workspace / ".git").mkdir()  # the workspace boundary
    nested = workspace / "src" / "pkg"
    nested.mkdir(parents=True)

    s = load_settings(nested, {}, env_for(home))
    assert s.model == "project" and s.max_turns == 5
    assert s.retry.delays == [2.0] and s.retry.turn_timeout == 7  # tables merge key by key
    assert s.sources == [str(home / "config.toml"), str(project / "config.toml")]

    s = load_settings(nested, {}, env_for(home, OSPREY_MODEL="env"))
    assert s.model == "env"
    s = load_settings(nested, {"model": "flag", "max_turns": None}, env_for(home, OSPREY_MODEL="env"))
    assert s.model == "flag" and s.max_turns == 5


def test_dotenv_fills_but_never_overrides(workspace: Path, home: Path) -> None:
    (workspace / ".env").write_text('# keys\nexport ANTHROPIC_API_KEY="from-dotenv"\nOSPREY_MODEL=dotenv-model # note\n')
    s = load_settings(workspace, {"provider": "anthropic"}, {"OSPREY_HOME": str(home)})
    assert s.api_key is not None and s.api_key.get_secret_value() == "from-dotenv"
    assert s.model == "dotenv-model"
    s = load_settings(workspace, {"provider": "anthropic"}, {"OSPREY_HOME": str(home), "ANTHROPIC_API_KEY": "real", "OSPREY_MODEL": "real-model"})
    assert s.api_key.get_secret_value() == "real" and s.model == "real-model"


def test_home_dotenv_is_read_after_the_project_one(workspace: Path, home: Path) -> None:
    (home / ".env").write_text("OPENAI_API_KEY=home\nOSPREY_MAX_TURNS=9\n")
    (workspace / ".env").write_text("OPENAI_API_KEY=project\n")
    s = load_settings(workspace, {}, {"OSPREY_HOME": str(home)})
    assert s.api_key.get_secret_value() == "project" and s.max_turns == 9


def test_unknown_key_names_file_and_key(workspace: Path, home: Path) -> None:
    (workspace / ".osprey").mkdir()
    bad = workspace / ".osprey" / "config.toml"
    bad.write_text("[retry]\ndelay = 3\n")
    with pytest.raises(ConfigError) as err:
        load_settings(workspace, {}, env_for(home))
    assert str(bad) in str(err.value) and "unknown key 'retry.delay'" in str(err.value)


def test_bad_value_names_file_and_key(workspace: Path, home: Path) -> None:
    (home / "config.toml").write_text('approval_policy = "sometimes"\n[tool_results]\nmax_chars = 10\n')
    with pytest.raises(ConfigError) as err:
        load_settings(workspace, {}, env_for(home))
    message = str(err.value)
    assert str(home / "config.toml") in message
    assert "key 'approval_policy'" in message and "key 'tool_results.max_chars'" in message


def test_invalid_toml_is_reported(workspace: Path, home: Path) -> None:
    (home / "config.toml").write_text("model = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(workspace, {}, env_for(home))


def test_bad_environment_value_names_the_variable(workspace: Path, home: Path) -> None:
    with pytest.raises(ConfigError, match="variable OSPREY_MAX_TURNS"):
        load_settings(workspace, {}, env_for(home, OSPREY_MAX_TURNS="many"))


def test_missing_key_is_an_error_unless_base_url_is_set(workspace: Path, home: Path) -> None:
    env = {"OSPREY_HOME": str(home), "HOME": str(home.parent)}
    with pytest.raises(ConfigError, match="OPENAI_API_KEY is not set"):
        load_settings(workspace, {}, env)
    s = load_settings(workspace, {"base_url": "http://127.0.0.1:9/v1/"}, env)
    assert s.api_key is None and s.base_url == "http://127.0.0.1:9/v1"


def test_provider_table_and_api_key_env(workspace: Path, home: Path) -> None:
    (home / "config.toml").write_text('[providers.openai]\nbase_url = "http://127.0.0.1:1/v1"\napi_key_env = "ROUTER_KEY"\nmodel = "m1"\n')
    s = load_settings(workspace, {}, {"OSPREY_HOME": str(home), "ROUTER_KEY": "rk"})
    assert (s.base_url, s.model, s.api_key.get_secret_value()) == ("http://127.0.0.1:1/v1", "m1", "rk")


def test_replay_needs_an_existing_file(workspace: Path, home: Path) -> None:
    with pytest.raises(ConfigError, match="--replay FILE"):
        load_settings(workspace, {"provider": "replay"}, env_for(home))
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(workspace, {"replay_file": "nope.jsonl"}, env_for(home))
    (workspace / "r.jsonl").write_text("")
    s = load_settings(workspace, {"replay_file": "r.jsonl"}, {"OSPREY_HOME": str(home)})
    assert s.provider == "replay" and s.replay_file == workspace / "r.jsonl"


def test_global_file_is_not_taken_for_a_project_file(tmp_path: Path) -> None:
    home = tmp_path / "user" / ".osprey"
    home.mkdir(parents=True)
    (home / "config.toml").write_text("")
    project = tmp_path / "user" / "repo"
    project.mkdir()
    assert find_project_configs(project, home) == []


def test_missing_working_directory(tmp_path: Path, home: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "missing", {}, env_for(home))


def test_parse_dotenv_forms() -> None:
    parsed = parse_dotenv("A=1\n B = two \nexport C='three four'\nD=\"x#y\"\nE=v # comment\nnot a line\n#F=1\n")
    assert parsed == {"A": "1", "B": "two", "C": "three four", "D": "x#y", "E": "v"}


def test_tool_environment_drops_credentials() -> None:
    from osprey.config import tool_environment

    env = {"PATH": "/bin", "HOME": "/h", "OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k", "OSPREY_HOME": "/o", "GITHUB_TOKEN": "t",
           "AWS_SECRET_ACCESS_KEY": "s", "DB_PASSWORD": "p", "MY_APIKEY": "a", "LANG": "C", "TOKENIZERS_PARALLELISM": "false"}
    kept = tool_environment(env)
    for secret in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OSPREY_HOME", "GITHUB_TOKEN", "DB_PASSWORD", "MY_APIKEY", "AWS_SECRET_ACCESS_KEY"):
        assert secret not in kept
    assert {"PATH", "HOME", "LANG", "TOKENIZERS_PARALLELISM"} <= set(kept)


async def test_host_commands_do_not_see_credentials(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from osprey.dispatch import open_tool_service
    from osprey.tools.process import ProcessManager

    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    async with open_tool_service([str(workspace)]) as service:
        out = (await service.client.bash("echo key=${OPENAI_API_KEY:-none} path=${PATH:+set}")).output
    assert "key=none" in out and "path=set" in out
    manager = ProcessManager([str(workspace)])
    p = await manager.start("echo key=${OPENAI_API_KEY:-none}")
    await p.proc.wait()
    await p.reader
    assert manager.output(p.id)[0].strip() == "key=none"

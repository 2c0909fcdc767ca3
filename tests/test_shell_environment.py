"""The environment host commands get: the default credential filter and the [shell_environment] policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from osprey.config import ShellEnvironmentPolicy, load_settings, settings_tool_environment, tool_environment
from osprey.tools.process import ProcessManager

CREDENTIALS = {
    "DATABASE_URL": "postgres://app:hunter2@db.internal:5432/app",
    "MYSQL_PWD": "hunter2",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
    "CI_JOB_JWT": "eyJhbGciOi",
    "SENTRY_DSN": "https://abc123@o1.ingest.sentry.io/1",
    "STRIPE_KEY": "rk_live_x",
    "SIGNING_KEY": "x",
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "x",
    "AWS_SESSION_TOKEN": "x",
    "GITHUB_PAT": "x",
    "GITHUB_TOKEN": "x",
    "GH_TOKEN": "x",
    "NPM_AUTH": "x",
    "DOCKER_AUTH_CONFIG": "{}",
    "KUBECONFIG": "/home/u/.kube/prod",
    "COHERE_KEY": "x",
    "OPENAI_API_KEY": "x",
    "ANTHROPIC_API_KEY": "x",
    "OSPREY_HOME": "/home/u/.osprey",
    "DB_PASSWORD": "x",
    "SMTP_PASS": "x",
    "MY_APIKEY": "x",
    "GOOGLE_APPLICATION_CREDENTIALS": "/k.json",
    "SESSION_COOKIE": "x",
    "GPG_PRIVATE_KEY": "x",
    "HTTPS_PROXY": "http://user:pw@proxy:3128",
    "REDIS_URI": "redis://:pw@cache:6379/0",
    "JDBC_URL": "jdbc:postgresql://db/app?user=app&password=pw",
    "INNOCENT_LOOKING": "ghp_0123456789abcdefghijABCDEFGHIJ012345",
}
HARMLESS = {
    "PATH": "/usr/bin:/bin", "HOME": "/home/u", "LANG": "C.UTF-8", "TERM": "xterm", "PWD": "/w", "OLDPWD": "/",
    "TOKENIZERS_PARALLELISM": "false", "EDITOR": "vi", "DATABASE_URL_RO": "postgres://db.internal/app",
    "HTTP_PROXY": "http://proxy:3128", "KEYBOARD_LAYOUT": "us", "LC_ALL": "C", "TZ": "UTC", "USER": "u",
}


def test_default_filter_drops_credentials_and_keeps_the_rest() -> None:
    kept = tool_environment({**CREDENTIALS, **HARMLESS})
    assert kept == HARMLESS


@pytest.mark.parametrize("name", sorted(CREDENTIALS))
def test_each_credential_is_dropped(name: str) -> None:
    assert tool_environment({name: CREDENTIALS[name], "PATH": "/bin"}) == {"PATH": "/bin"}


def test_url_without_a_password_is_kept_and_with_one_dropped() -> None:
    env = {"DATABASE_URL": "postgres://db/app", "UPSTREAM": "https://example.org/v1", "MIRROR": "https://anonymous@example.org/"}
    assert tool_environment(env) == env
    assert tool_environment({"DATABASE_URL": "postgres://app:secret@db/app"}) == {}
    assert tool_environment({"DATABASE_URL": "postgres://app@db/app"}) == {}  # an address name with a user part


def test_custom_api_key_variable_is_dropped() -> None:
    env = {"COHERE": "k", "LLM_ACCESS": "k", "PATH": "/bin"}
    assert tool_environment(env, extra_secret_names=["COHERE", "llm_access"]) == {"PATH": "/bin"}


def test_passthrough_keeps_a_named_credential() -> None:
    policy = ShellEnvironmentPolicy(passthrough=["GH_TOKEN"])
    assert tool_environment({"GH_TOKEN": "t", "GITHUB_TOKEN": "t", "PATH": "/bin"}, policy) == {"GH_TOKEN": "t", "PATH": "/bin"}


def test_exclude_include_only_and_set_in_order() -> None:
    env = {"PATH": "/bin", "HOME": "/h", "NODE_ENV": "dev", "node_options": "x", "GH_TOKEN": "t", "EDITOR": "vi"}
    policy = ShellEnvironmentPolicy(exclude=["NODE_*"], passthrough=["GH_TOKEN"])
    assert tool_environment(env, policy) == {"PATH": "/bin", "HOME": "/h", "GH_TOKEN": "t", "EDITOR": "vi"}  # globs ignore case
    policy = ShellEnvironmentPolicy(exclude=["gh_*"], passthrough=["GH_TOKEN"])
    assert "GH_TOKEN" not in tool_environment(env, policy)  # exclude comes after passthrough
    policy = ShellEnvironmentPolicy(include_only=["path", "H*"], set={"CI": "1", "PATH": "/opt/bin"})
    assert tool_environment(env, policy) == {"PATH": "/opt/bin", "HOME": "/h", "CI": "1"}  # set comes last


def test_inherit_core_and_none() -> None:
    env = {**HARMLESS, "EDITOR": "vi", "LC_CTYPE": "C", "SSH_AUTH_SOCK": "/s"}
    core = tool_environment(env, ShellEnvironmentPolicy(inherit="core"))
    assert core == {k: env[k] for k in ("PATH", "HOME", "LANG", "TERM", "PWD", "LC_ALL", "LC_CTYPE", "TZ", "USER")}
    assert tool_environment(env, ShellEnvironmentPolicy(inherit="none", set={"PATH": "/bin"})) == {"PATH": "/bin"}


def test_policy_rejects_bad_names() -> None:
    with pytest.raises(ValueError):
        ShellEnvironmentPolicy(set={"BAD=NAME": "x"})
    with pytest.raises(ValueError):
        ShellEnvironmentPolicy(passthrough=["*"])


def test_settings_carry_the_policy_and_key_variables(tmp_path: Path, workspace: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[providers.openai]\napi_key_env = "ROUTER"\n[shell_environment]\npassthrough = ["GH_TOKEN"]\nexclude = ["EDITOR"]\n'
    )
    s = load_settings(workspace, {}, {"OSPREY_HOME": str(home), "ROUTER": "rk"})
    env = {"ROUTER": "rk", "GH_TOKEN": "t", "EDITOR": "vi", "PATH": "/bin"}
    assert settings_tool_environment(s, env) == {"GH_TOKEN": "t", "PATH": "/bin"}


def test_bad_policy_in_a_file_names_the_key(tmp_path: Path, workspace: Path) -> None:
    from osprey.errors import ConfigError

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[shell_environment]\ninherit = "some"\n')
    with pytest.raises(ConfigError, match="shell_environment.inherit"):
        load_settings(workspace, {}, {"OSPREY_HOME": str(home), "OPENAI_API_KEY": "k"})


async def test_process_manager_uses_the_environment_it_is_given(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GH_TOKEN", "from-the-broker")
    env = tool_environment(None, ShellEnvironmentPolicy(passthrough=["GH_TOKEN"], set={"MARK": "given"}))
    for manager, expected in ((ProcessManager([str(workspace)], env=env), "gh=from-the-broker mark=given"),
                              (ProcessManager([str(workspace)]), "gh=none mark=none")):
        p = await manager.start("echo gh=${GH_TOKEN:-none} mark=${MARK:-none}")
        await p.proc.wait()
        await p.reader
        assert manager.output(p.id)[0].strip() == expected

"""The TUI's default approval policy: on-request when neither a flag nor a configuration file sets one."""

from __future__ import annotations

from pathlib import Path

from osprey.config import load_settings


def _env(home: Path) -> dict[str, str]:
    return {"OSPREY_HOME": str(home), "OPENAI_API_KEY": "k"}


def test_interactive_default_is_on_request(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert load_settings(tmp_path, {}, _env(home), interactive=True).approval_policy == "on-request"
    assert load_settings(tmp_path, {}, _env(home)).approval_policy == "deny-untrusted"


def test_a_flag_or_the_user_config_beats_the_interactive_default(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert load_settings(tmp_path, {"approval_policy": "never"}, _env(home), interactive=True).approval_policy == "never"
    (home / "config.toml").write_text('approval_policy = "unless-trusted"\n')
    assert load_settings(tmp_path, {}, _env(home), interactive=True).approval_policy == "unless-trusted"
    env = {**_env(home), "OSPREY_APPROVAL_POLICY": "deny-untrusted"}
    assert load_settings(tmp_path, {}, env, interactive=True).approval_policy == "deny-untrusted"


def test_an_untrusted_project_may_keep_or_raise_the_interactive_default_but_not_lower_it(tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    (workspace / ".osprey").mkdir(parents=True)
    config = workspace / ".osprey" / "config.toml"
    config.write_text('approval_policy = "on-request"\n')
    same = load_settings(workspace, {}, _env(home), interactive=True)
    assert same.approval_policy == "on-request" and not [w for w in same.warnings if "approval_policy" in w]
    config.write_text('approval_policy = "deny-untrusted"\n')
    assert load_settings(workspace, {}, _env(home), interactive=True).approval_policy == "deny-untrusted"
    config.write_text('approval_policy = "never"\n')
    lowered = load_settings(workspace, {}, _env(home), interactive=True)
    assert lowered.approval_policy == "on-request"
    assert any("ignored approval_policy" in w for w in lowered.warnings)
    # Headless, the same on-request file lowers deny-untrusted, and is ignored.
    config.write_text('approval_policy = "on-request"\n')
    headless = load_settings(workspace, {}, _env(home))
    assert headless.approval_policy == "deny-untrusted" and any("ignored approval_policy" in w for w in headless.warnings)

"""A model server's base URL is checked when the configuration loads (from flags, variables, `.env`
and config files alike), and a local server that refuses the connection fails the turn at once,
saying it may not be running, with no retries. Connections go to a closed loopback port only; the
classification of other addresses is tested as the pure function it is."""

from __future__ import annotations

import errno
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tmux_pane import Tmux, serve

from osprey.config import load_settings
from osprey.config.schema import RetrySettings, base_url_problem
from osprey.errors import ConfigError, ProviderError
from osprey.messages import ModelRequest, UserMessage
from osprey.providers.addresses import local_address, local_name, local_target, refused, resolves_locally
from osprey.providers.anthropic import AnthropicProvider
from osprey.providers.base import http_client
from osprey.providers.openai import OpenAIProvider
from osprey.session.flags import FlagError, parse_flags
from osprey.session.loop import run_turn

OSPREY = str(Path(sys.executable).with_name("osprey"))
HINT = "is the server running?"
# A refused loopback connection fails within this (the old retries took 21 s).
AT_ONCE_S = 2.0
# `osprey agent` as a whole: start-up, the refused turn, the journal.
PROCESS_AT_ONCE_S = 8.0


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on: bound, then closed."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home" / ".osprey"
    h.mkdir(parents=True)
    return h


def env_for(home: Path, **extra: str) -> dict[str, str]:
    return {"OSPREY_HOME": str(home), "HOME": str(home.parent), "OPENAI_API_KEY": "k", **extra}


def request() -> ModelRequest:
    return ModelRequest(system="s", messages=[UserMessage(content="hi")], tools=[])


# ---------------------------------------------------------------------------------------------
# Which addresses are local (pure functions)


@pytest.mark.parametrize(("address", "local"), [
    ("127.0.0.1", True), ("127.255.0.9", True), ("::1", True), ("10.0.0.1", True), ("10.255.255.255", True),
    ("172.16.0.1", True), ("172.31.255.254", True), ("192.168.1.20", True), ("fc00::1", True), ("fd12:3456::7", True),
    ("::ffff:127.0.0.1", True), ("::ffff:192.168.0.1", True), ("0.0.0.0", True), ("::", True), ("[::1]", True),
    ("172.15.255.255", False), ("172.32.0.1", False), ("192.169.0.1", False), ("11.0.0.1", False), ("8.8.8.8", False),
    ("203.0.113.7", False), ("2001:db8::1", False), ("fe00::1", False), ("::ffff:8.8.8.8", False), ("100.64.0.1", False),
    ("localhost", False), ("api.openai.com", False), ("", False),
])
def test_local_addresses_are_loopback_and_the_private_ranges(address: str, local: bool) -> None:
    assert local_address(address) is local


@pytest.mark.parametrize(("host", "expected"), [
    ("localhost", True), ("LOCALHOST", True), ("localhost.", True), ("api.localhost", True), ("127.0.0.1", True),
    ("::1", True), ("10.2.3.4", True), ("8.8.8.8", False), ("2001:db8::1", False),
    ("gpu-box", None), ("api.openai.com", None), ("localhost.example.com", None),
])
def test_a_name_is_local_by_itself_only_when_it_is_an_address_or_localhost(host: str, expected: bool | None) -> None:
    assert local_name(host) is expected


def test_a_name_is_local_when_everything_it_resolves_to_is() -> None:
    assert local_target("gpu-box", ["192.168.1.7"])
    assert local_target("dev.internal", ["10.0.0.2", "fd00::2"])
    assert local_target("localhost", [])  # by its name
    assert not local_target("api.example.com", ["93.184.215.14"])
    assert not local_target("split.example.com", ["10.0.0.2", "93.184.215.14"])  # one public address is enough
    assert not local_target("unresolved.example", [])
    assert not local_target("8.8.8.8", ["127.0.0.1"])  # an address is what it is


async def test_resolving_a_local_name_or_an_address_needs_no_lookup() -> None:
    assert await resolves_locally("localhost") and await resolves_locally("127.0.0.1") and await resolves_locally("::1")
    assert not await resolves_locally("203.0.113.7")


def _raised(outer: BaseException, cause: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as inner:
            raise outer from inner
    except BaseException as caught:
        return caught


def test_a_refusal_is_found_among_the_causes() -> None:
    assert refused(_raised(httpx.ConnectError("x"), ConnectionRefusedError(errno.ECONNREFUSED, "refused")))
    deeper = _raised(OSError("All connection attempts failed"),
                     ExceptionGroup("attempts", [OSError(errno.EADDRNOTAVAIL, "no v6"), ConnectionRefusedError(errno.ECONNREFUSED, "refused")]))
    assert refused(_raised(httpx.ConnectError("x"), deeper))
    assert refused(OSError(errno.ECONNREFUSED, "refused"))
    assert not refused(_raised(httpx.ConnectError("x"), OSError(errno.EHOSTUNREACH, "no route")))
    assert not refused(_raised(httpx.ConnectError("x"), socket.gaierror(socket.EAI_NONAME, "unknown name")))
    assert not refused(httpx.ConnectError("x"))


# ---------------------------------------------------------------------------------------------
# The check when the configuration loads


@pytest.mark.parametrize(("value", "words"), [
    ("127.0.0.1:18080/v1", "did you mean http://127.0.0.1:18080/v1?"),
    ("localhost:11434/v1", "did you mean http://localhost:11434/v1?"),
    ("[::1]:8080/v1", "did you mean http://[::1]:8080/v1?"),
    ("gpu-box:8000/v1", "did you mean http://gpu-box:8000/v1?"),
    ("api.openai.com/v1", "did you mean https://api.openai.com/v1?"),
    ("http:/127.0.0.1:8080/v1", "did you mean http://127.0.0.1:8080/v1?"),
    ("ftp://127.0.0.1/v1", "use http:// or https://"),
    ("http:///v1", "names no host"),
    ("http://127.0.0.1:99999/v1", "port is not a number"),
    ("http://127.0.0.1:8080/v1 ", "no spaces"),
    ("", "starts with http:// or https://"),
])
def test_a_base_url_without_a_scheme_or_a_host_is_refused_with_the_fix(value: str, words: str) -> None:
    problem = base_url_problem(value)
    assert problem is not None and words in problem


@pytest.mark.parametrize("value", ["http://127.0.0.1:8080/v1", "https://api.openai.com/v1", "HTTP://LOCALHOST:11434/v1",
                                   "http://[::1]:8000", "https://openrouter.ai/api/v1", "http://user:secret@gpu-box:4000"])
def test_a_usual_base_url_passes(value: str) -> None:
    assert base_url_problem(value) is None


def test_every_layer_names_itself_and_the_fix(workspace: Path, home: Path) -> None:
    fix = "did you mean http://127.0.0.1:18080/v1?"
    # The user's config file, top level and per provider.
    config = home / "config.toml"
    config.write_text('base_url = "127.0.0.1:18080/v1"\n')
    with pytest.raises(ConfigError) as raised:
        load_settings(workspace, {}, env_for(home))
    assert str(raised.value).startswith(f"{config}: key 'base_url': ") and fix in str(raised.value)
    config.write_text('[providers.anthropic]\nbase_url = "127.0.0.1:18080/v1"\n')
    with pytest.raises(ConfigError, match=r"key 'providers\.anthropic\.base_url': .*did you mean http://127\.0\.0\.1:18080/v1\?"):
        load_settings(workspace, {}, env_for(home))
    config.unlink()
    # A variable, in the environment or in the user's .env.
    with pytest.raises(ConfigError) as raised:
        load_settings(workspace, {}, env_for(home, OSPREY_BASE_URL="127.0.0.1:18080/v1"))
    assert str(raised.value).startswith("environment: variable OSPREY_BASE_URL: ") and fix in str(raised.value)
    (home / ".env").write_text("OSPREY_BASE_URL=127.0.0.1:18080/v1\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(workspace, {}, env_for(home))
    assert str(raised.value).startswith(f"{home / '.env'}: variable OSPREY_BASE_URL: ") and fix in str(raised.value)
    (home / ".env").unlink()
    # The command line: a usage error naming the flag.
    with pytest.raises(FlagError) as flag:
        parse_flags({"base_url": "127.0.0.1:18080/v1"}, interactive=False)
    assert str(flag.value) == f"--base-url: the URL has no scheme (http:// or https://); {fix}"
    with pytest.raises(FlagError, match="^--base-url: .*names no host"):
        parse_flags({"base_url": "http:///v1"}, interactive=True)
    assert parse_flags({"base_url": "http://127.0.0.1:18080/v1"}, interactive=False).base_url == "http://127.0.0.1:18080/v1"


def test_a_project_file_with_a_bad_base_url_is_skipped_and_searxng_urls_are_not_checked(workspace: Path, home: Path) -> None:
    project = workspace / ".osprey"
    project.mkdir()
    (project / "config.toml").write_text('model = "project-model"\nbase_url = "localhost:8080/v1"\n')
    s = load_settings(workspace, {}, env_for(home))
    assert s.model == "gpt-4.1" and s.base_url == "https://api.openai.com/v1"
    [warning] = [w for w in s.warnings if "config.toml" in w]
    assert "key 'base_url'" in warning and "did you mean http://localhost:8080/v1?" in warning and warning.endswith("it was skipped")
    # The search service's URL is another setting, with checks of its own.
    (project / "config.toml").unlink()
    (home / "config.toml").write_text('[web_search]\nsearxng_url = "localhost:8888"\n')
    s = load_settings(workspace, {}, env_for(home))
    assert s.web_search is not None and s.web_search.url == "localhost:8888" and s.warnings == []


# ---------------------------------------------------------------------------------------------
# A refused connection


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_refused_local_server_fails_the_turn_at_once_with_a_hint(closed_port: int, host: str, kind: str) -> None:
    if host == "[::1]" and not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    base_url = f"http://{host}:{closed_port}/v1"
    notices: list[str] = []
    async with http_client(httpx.Timeout(30.0, connect=10.0), base_url) as client:
        provider = (OpenAIProvider(client, "m", base_url, None) if kind == "openai"
                    else AnthropicProvider(client, "m", base_url, None))
        started = time.monotonic()
        with pytest.raises(ProviderError) as raised:
            await run_turn(provider, request(), RetrySettings(), notify=notices.append)
        elapsed = time.monotonic() - started
    assert elapsed < AT_ONCE_S and notices == []  # no retry was even announced
    message = str(raised.value)
    assert not raised.value.retryable and HINT in message
    assert f"refused the connection at {base_url}/" in message and f"http://{host}:{closed_port}," in message


async def test_only_a_local_address_is_spared_the_retries() -> None:
    """A refusal from a private address fails at once; one from a public address is retried as
    before. The connection attempts are simulated (nothing is sent anywhere): the transport refuses
    as the system would."""
    attempts: list[str] = []

    def refuse(req: httpx.Request) -> httpx.Response:
        attempts.append(str(req.url))
        try:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
        except ConnectionRefusedError as exc:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=req) from exc

    retry = RetrySettings(max_retries=2, delays=[0.01])
    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as client:
        private = OpenAIProvider(client, "m", "http://10.1.2.3:8000/v1", None)
        with pytest.raises(ProviderError, match="is the server running") as raised:
            await run_turn(private, request(), retry)
        assert not raised.value.retryable and attempts == ["http://10.1.2.3:8000/v1/chat/completions"]
        attempts.clear()
        public = OpenAIProvider(client, "m", "http://203.0.113.7:8000/v1", None)
        notices: list[str] = []
        with pytest.raises(ProviderError, match="could not be reached") as raised:
            await run_turn(public, request(), retry, notify=notices.append)
        assert raised.value.retryable and HINT not in str(raised.value)
        assert len(attempts) == 3 and len(notices) == 2


# ---------------------------------------------------------------------------------------------
# The commands


def _osprey(*args: str, env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run([OSPREY, *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd)
    return done, time.monotonic() - started


def test_agent_refuses_a_base_url_without_a_scheme_as_a_usage_error(osprey_env: dict[str, str], tmp_path: Path) -> None:
    done, _ = _osprey("agent", "--base-url", "127.0.0.1:18080/v1", "hi", env=osprey_env, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert "--base-url: the URL has no scheme (http:// or https://); did you mean http://127.0.0.1:18080/v1?" in done.stderr
    # The terminal UI resolves its flags the same way, before it needs a terminal.
    done, _ = _osprey("--base-url", "127.0.0.1:18080/v1", env=osprey_env, cwd=tmp_path)
    assert done.returncode == 2 and "did you mean http://127.0.0.1:18080/v1?" in done.stderr
    # A variable is a configuration error (exit 1), naming the variable.
    done, _ = _osprey("agent", "hi", env={**osprey_env, "OSPREY_BASE_URL": "localhost:1/v1"}, cwd=tmp_path)
    assert done.returncode == 1 and "variable OSPREY_BASE_URL" in done.stderr and "did you mean http://localhost:1/v1?" in done.stderr


def test_agent_against_a_closed_local_port_ends_at_once_with_the_hint(osprey_env: dict[str, str], tmp_path: Path, closed_port: int) -> None:
    base_url = f"http://127.0.0.1:{closed_port}/v1"
    done, elapsed = _osprey("agent", "--base-url", base_url, "hi", env=osprey_env, cwd=tmp_path)
    assert elapsed < PROCESS_AT_ONCE_S, (elapsed, done.stderr)
    assert done.returncode == 1, done.stderr
    end = json.loads(done.stdout.splitlines()[-1])
    assert end["type"] == "session_end" and end["outcome"] == "Error" and HINT in end["error"]
    assert HINT in done.stderr and "retrying" not in done.stdout + done.stderr


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    yield from serve(tmp_path)


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_terminal_ui_shows_the_hint_at_once(tmux: Tmux, osprey_env: dict[str, str], tmp_path: Path, closed_port: int) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    tmux.start("ui", [OSPREY, "-C", str(workspace), "--base-url", f"http://127.0.0.1:{closed_port}/v1"], osprey_env, hold=True)
    tmux.wait("ui", lambda s: "· ready" in s, "the session to start")
    tmux.text("ui", "hi")
    tmux.keys("ui", "Enter")
    started = time.monotonic()
    screen = tmux.wait("ui", lambda s: HINT in " ".join(s.split()) or "retrying" in s, "the error")
    elapsed = time.monotonic() - started
    assert HINT in " ".join(screen.split()) and "retrying" not in screen, screen
    assert elapsed < AT_ONCE_S + 1.0, elapsed
    tmux.keys("ui", "C-q")  # leave in order: a terminal closed under it is the teardown's to handle, not this test's
    tmux.wait("ui", lambda s: "exit-status=" in s, "osprey to quit")

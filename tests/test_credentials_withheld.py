"""Credentials in Osprey's environment never reach a host command: a realistic table of
variables, each withheld by the filter, and each absent from what the local dispatcher's `bash`,
a `process`, a hook and a custom tool see in a real `osprey agent` run; look-alikes still reach them, and an
explicit `passthrough` still works."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from osprey.config import ShellEnvironmentPolicy, tool_environment
from osprey.config.environment import MAX_VALUE_CHARS, is_credential
from osprey.testing.model_server import ModelServer, Reply

PEM = ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n"
       "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n-----END PRIVATE KEY-----\n")
SERVICE_ACCOUNT = json.dumps({
    "type": "service_account", "project_id": "shop-prod", "private_key_id": "4f2a9c0d1e",
    "private_key": PEM, "client_email": "ci@shop-prod.iam.gserviceaccount.com", "client_id": "1029384756",
})
JWT = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJwcm9qZWN0X3BhdGg6c2hvcC9hcGkiLCJhdWQiOiJ2YXVsdCJ9.c2lnbmF0dXJlLXBhcnQ"

# name -> value: what a developer's or a CI runner's environment really holds. Many names say
# nothing of a credential, so the value alone must give it away.
CREDENTIALS: dict[str, str] = {
    # connection strings without a URL's user part: Azure's, a SAS URL, npm's and netrc's forms
    "AZURE_STORAGE_CONNECTION_STRING": "DefaultEndpointsProtocol=https;AccountName=shopdata;AccountKey=q8Zk3R0pLm2vX9tB4nW7yE1uI6oA5sD8fG2hJ0kL3zX4cV7bN9mQ1wE5rT8yU2iO6pA3sD9fG1hJ4kL7zX0cV==;EndpointSuffix=core.windows.net",
    "AzureWebJobsStorage": "DefaultEndpointsProtocol=https;AccountName=fn01;AccountKey=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1ub3A=",
    "SERVICEBUS_CONNECTION": "Endpoint=sb://orders.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=k3yV4lu3Abc123Def456Ghi789=",
    "BLOB_SAS": "https://shopdata.blob.core.windows.net/exports?sv=2022-11-02&ss=b&srt=co&sp=rl&se=2027-01-01&sig=Tq8%2BbZk3R0pLm2vX9tB4nW7yE1uI6oA5sD8%3D",
    "NPM_RC": "//registry.npmjs.org/:_authToken=123e4567-e89b-12d3-a456-426614174000",
    "NETRC": "machine api.example.com login deploy password Hs7dK2mQ9x",
    "DATABASE_URL": "postgres://app:Xk29fhq3Lp@db.internal:5432/shop",
    "REDIS_URL": "redis://:Qw8sd7f6g5h4@cache.internal:6379/0",
    "MONGODB_URI": "mongodb+srv://svc:Pa55w0rdZq@cluster0.ab1cd.mongodb.net/prod?retryWrites=true&w=majority",
    "AMQP_URL": "amqps://worker:r4bb1tPass@mq.internal:5671/orders",
    "CELERY_BROKER": "redis://:c3l3ryBr0ker@cache.internal:6379/1",
    "JDBC_CONNECTION": "jdbc:postgresql://db.internal/shop?user=app&password=Xk29fhq3Lp",
    "ConnectionStrings__Default": "Server=db.internal;Database=shop;User Id=sa;Password=Str0ng!Pass9;",
    "SENTRY_DSN": "https://9c1f0e2d3b4a5c6d7e8f9a0b1c2d3e4f@o123456.ingest.sentry.io/4504",
    "PIP_EXTRA_INDEX_URL": "https://gitlab-ci-token-7f3a9b2c@gitlab.example.org/api/v4/projects/42/packages/pypi/simple",
    "HTTPS_PROXY": "http://jdoe:pr0xyPass@proxy.corp:3128",
    "MYSQL_PWD": "hunter2hunter2",
    "MYSQL_OPTS": "--user=app --password=Xk29fhq3Lp --host=db.internal",
    "PSQL_COMMAND": "PGPASSWORD=Xk29fhq3Lp psql -h db.internal shop",
    # JSON documents and private keys
    "GOOGLE_APPLICATION_CREDENTIALS_JSON": SERVICE_ACCOUNT,
    "FIREBASE_SERVICE_ACCOUNT": SERVICE_ACCOUNT,
    "DEPLOY_SSH": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE KEY-----\n",
    "DOCKER_AUTH_CONFIG": '{"auths":{"registry.gitlab.com":{"auth":"Z2l0bGFiLWNpLXRva2VuOnNlY3JldA=="}}}',
    "RELEASE_CONFIG": '{"registry": "npm", "token": "r3l3as3-t0k3n-v4lue"}',
    # token formats, under names that do not say so
    "STRIPE_SK": "sk_live_51HxQ2ZKaB3cD4eF5gH6iJ7kL8mN9oP0qR",
    "STRIPE_RESTRICTED": "rk_live_51HxQ2ZKaB3cD4eF5gH6iJ7kL8m",
    "STRIPE_WH": "whsec_7d9f8a6b5c4e3d2f1a0b9c8d7e6f5a4b",
    "HF_HUB": "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "GOOGLE_MAPS": "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    "GCP_ACCESS": "ya29.a0AfH6SMBx7ZqL3k9Rt2Vw4Ys6Uu8Ii0Oo1Pp3",
    "OPENROUTER": "sk-or-v1-0a1b2c3d4e5f60718293a4b5c6d7e8f9",
    "GH_ENTERPRISE": "ghp_R4nd0mT0k3nV4lu3F0rGitHub1234567890",
    "DEPLOY_BOT": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "GITLAB": "glpat-xY9zW8vU7tS6rQ5pO4nM",
    "SLACK_BOT": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "BACKUP_S3": "ASIAY34FZKBOKMUTVV7A",
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "NPM_PUBLISH": "npm_aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5",
    "TWINE": "pypi-AgEIcHlwaS5vcmcCJGE0ZjJkYzk0LTQ5ZjMtNGYxZi1hYzM2LWE0ZjJkYzk0NDlmMwACKlszLCJiYWQiXQ",
    "VAULT": "hvs.CAESIJ2lGxP7bQ8vZ4yL9kR1tW3uE5o",
    "OIDC_ASSERTION": JWT,
    "CI_JOB_JWT": JWT,
    # headers
    "GIT_CONFIG_PARAMETERS": "'http.extraHeader=Authorization: Bearer ghs_16C7e42F292c6912E7710c838347Ae178B4a'",
    "GIT_CONFIG_VALUE_0": "AUTHORIZATION: basic eC1hY2Nlc3MtdG9rZW46Z2hzXzE2QzdlNDJGMjky",
    "EXTRA_HEADERS": "Accept: application/json\nAuthorization: token 9f8e7d6c5b4a39281706f5e4d3c2b1a0",
    "LLM_PROXY_HEADER": "Bearer 0a1b2c3d4e5f6a7b8c9d",
    # names that say so
    "GITHUB_TOKEN": "ghs_16C7e42F292c6912E7710c838347Ae178B4a",
    "HUGGING_FACE_HUB_TOKEN": "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "NODE_AUTH_TOKEN": "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d",
    "DB_PASSWORD": "Xk29fhq3Lp",
    "SSH_AUTH_SOCK": "/tmp/ssh-XXXXabcd/agent.1234",
    "KUBECONFIG": "/home/dev/.kube/prod-admin",
    "COHERE_APIKEY": "co-0a1b2c3d4e5f6a7b8c9d",
}
# Variables that must still reach host commands: look-alikes of the names and values above.
LOOKALIKES: dict[str, str] = {
    "PATH": os.defpath + ":/usr/local/bin", "LANG": "C.UTF-8", "TERM": "xterm-256color",
    "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), "/srv/app/src"])), "VIRTUAL_ENV": "/srv/app/.venv", "GOPATH": "/home/dev/go", "NODE_ENV": "production",
    "CI": "true", "KEYBOARD_LAYOUT": "us", "MONKEY": "1", "LESSKEY": "/home/dev/.lesskey", "PWD": "/srv/app", "OLDPWD": "/",
    "TOKENIZERS_PARALLELISM": "false", "EDITOR": "vi", "HTTP_PROXY": "http://proxy.corp:3128", "NO_PROXY": "localhost,127.0.0.1",
    "DATABASE_HOST": "db.internal", "REDIS_URL_RO": "redis://cache.internal:6379/0", "GITHUB_SERVER_URL": "https://github.com",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "PIP_INDEX_URL": "https://pypi.org/simple",
    "GIT_AUTHOR_NAME": "Ada Lovelace", "GIT_AUTHOR_EMAIL": "ada@example.org", "HF_HOME": "/home/dev/.cache/huggingface",
    "AWS_REGION": "eu-west-1", "AWS_PROFILE": "dev", "BUILD_TAG": "task-runner-abcdefghijklmnopqrstuvwxyz0123",
    "XAUTHORITY": "/run/user/1000/.mutter-Xwaylandauth.ABC123", "GPG_TTY": "/dev/pts/1", "JAVA_HOME": "/usr/lib/jvm/java-17",
    "SSH_CONNECTION": "10.0.0.1 50000 10.0.0.2 22", "GOFLAGS": "-mod=mod", "COLORTERM": "truecolor",
    "LS_COLORS": "rs=0:di=01;34:ln=01;36:mh=00:pi=40;33:so=01;35:do=01;35:bd=40;33;01:*.tar=01;31:*.jpg=01;35" * 20,
    "MAVEN_OPTS": "-Xmx2g -Dfile.encoding=UTF-8", "APP_CONFIG": '{"theme": "dark", "retries": 3}',
}


@pytest.mark.parametrize("name", sorted(CREDENTIALS))
def test_each_credential_is_withheld(name: str) -> None:
    assert tool_environment({name: CREDENTIALS[name], "PATH": "/bin"}) == {"PATH": "/bin"}


@pytest.mark.parametrize("name", sorted(LOOKALIKES))
def test_each_lookalike_is_kept(name: str) -> None:
    assert not is_credential(name, LOOKALIKES[name])
    assert tool_environment({name: LOOKALIKES[name]}) == {name: LOOKALIKES[name]}


def test_the_table_covers_every_kind() -> None:
    assert len(CREDENTIALS) >= 25 and len(LOOKALIKES) >= 25
    assert tool_environment({**CREDENTIALS, **LOOKALIKES}) == LOOKALIKES


def test_passthrough_still_passes_a_named_credential() -> None:
    policy = ShellEnvironmentPolicy(passthrough=["DATABASE_URL", "HF_HUB", "GIT_CONFIG_PARAMETERS"])
    kept = tool_environment({**CREDENTIALS, **LOOKALIKES}, policy)
    assert kept == {**LOOKALIKES, **{n: CREDENTIALS[n] for n in policy.passthrough}}


def test_a_git_config_entry_that_holds_a_credential_takes_its_whole_group() -> None:
    # git refuses to start when GIT_CONFIG_COUNT names an entry that is missing.
    env = {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "http.https://github.com/.extraheader",
           "GIT_CONFIG_VALUE_0": CREDENTIALS["GIT_CONFIG_VALUE_0"], "GIT_CONFIG_KEY_1": "core.pager", "GIT_CONFIG_VALUE_1": "cat"}
    assert tool_environment(env) == {}
    harmless = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.pager", "GIT_CONFIG_VALUE_0": "cat"}
    assert tool_environment(harmless) == harmless


def test_an_address_with_a_user_part_is_withheld_only_under_an_address_name() -> None:
    assert tool_environment({"UPSTREAM_URL": "https://deploy-7f3a9b2c@git.example.org/x.git"}) == {}
    assert tool_environment({"UPSTREAM_URL": "https://git.example.org/x.git"}) == {"UPSTREAM_URL": "https://git.example.org/x.git"}
    with_user = {"MIRROR": "https://anonymous@mirror.example.org/"}
    assert tool_environment(with_user) == with_user


@pytest.mark.parametrize("value", [
    "eyJ" * (MAX_VALUE_CHARS // 3),  # JWT starts with no dot to end them
    "://" * (MAX_VALUE_CHARS // 3),
    "://a:" * (MAX_VALUE_CHARS // 5),
    "-----BEGIN " * (MAX_VALUE_CHARS // 11),
    "password" * (MAX_VALUE_CHARS // 8),
    "a" * MAX_VALUE_CHARS,
    "sk-" + "a-" * (MAX_VALUE_CHARS // 2 - 2),
    '"token"' + " " * (MAX_VALUE_CHARS - 8),
    "bearer " * (MAX_VALUE_CHARS // 7),
])
def test_scanning_a_value_is_bounded(value: str) -> None:
    started = time.monotonic()
    for _ in range(3):
        is_credential("HARMLESS_NAME", value)
    assert time.monotonic() - started < 1.5


def test_a_value_too_long_for_a_program_is_withheld_unread() -> None:
    assert tool_environment({"BLOB": "a" * MAX_VALUE_CHARS}) == {"BLOB": "a" * MAX_VALUE_CHARS}
    assert tool_environment({"BLOB": "a" * (MAX_VALUE_CHARS + 1)}) == {}


# ------------------------------------------------------------------ a real run: bash, a hook, a custom tool

DUMP = '#!/bin/sh\nenv -0 > "{out}"\n'


@dataclass
class Seen:
    """What each host command saw: NUL-separated `NAME=value` records."""

    bash: str
    process: str
    hook: str
    tool: str

    def homes(self) -> dict[str, dict[str, str]]:
        return {where: dict(item.split("=", 1) for item in text.split("\0") if "=" in item)
                for where, text in (("bash", self.bash), ("process", self.process), ("hook", self.hook), ("custom tool", self.tool))}


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seen]:
    """One `osprey agent` run whose environment holds the whole table; the model runs `env` with
    `process` and in `bash`, a user hook dumps its environment before each tool call, and a user
    custom tool dumps its own."""
    root = tmp_path_factory.mktemp("withheld")
    home, workspace, out = root / "osprey-home", root / "workspace", root / "out"
    for d in (home, home / "tools", workspace, out):
        d.mkdir()
    (home / "config.toml").write_text('[shell_environment]\npassthrough = ["PASSED_TOKEN"]\n')
    _executable(home / "hook.sh", DUMP.format(out=out / "hook.env"))
    (home / "hooks.toml").write_text(f'[[hooks.PreToolUse]]\n\n[[hooks.PreToolUse.hooks]]\ncommand = "{home / "hook.sh"}"\n')
    _executable(home / "tools" / "dump_env.sh", DUMP.format(out=out / "tool.env"))
    (home / "tools" / "dump_env.toml").write_text(
        f'name = "dump_env"\ndescription = "Write the environment to a file."\ncommand = ["{home / "tools" / "dump_env.sh"}"]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OSPREY_", "OPENAI_", "ANTHROPIC_"))}
    env.update(LOOKALIKES)
    env.update(CREDENTIALS)
    env.update({"OSPREY_HOME": str(home), "OPENAI_API_KEY": "sk-broker-key-0123456789abcdef", "HOME": str(root),
                "PATH": os.environ["PATH"], "PASSED_TOKEN": "passed-through-on-purpose"})
    server = ModelServer()
    server.start()
    try:
        server.add(Reply.tool_call("process", {"action": "start", "command": f"env -0 > {out / 'process.env.tmp'} && mv {out / 'process.env.tmp'} {out / 'process.env'}"}),
                   Reply.tool_call("bash", {"command": "env -0"}), Reply.tool_call("dump_env", {}), Reply.text("done"))
        proc = subprocess.run(
            [str(Path(sys.executable).with_name("osprey")), "agent", "-C", str(workspace), "--provider", "openai",
             "--base-url", server.base_url, "--yolo", "Show the environment."],
            env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        server.assert_clean()
    finally:
        server.close()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    results = {e["name"]: e for e in events if e["type"] == "tool_result"}
    assert results["bash"]["ok"] and results["dump_env"]["ok"], results
    deadline = time.monotonic() + 30
    while not (out / "process.env").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    yield Seen(results["bash"]["output"], (out / "process.env").read_text(), (out / "hook.env").read_text(), (out / "tool.env").read_text())


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(CREDENTIALS))
def test_no_host_command_sees_the_credential(seen: Seen, name: str) -> None:
    value = CREDENTIALS[name]
    for where, env in seen.homes().items():
        assert name not in env, (where, name)
        # Nor under another name (a whole value, or its secret part).
        assert value not in "\n".join(env.values()), (where, name)


@pytest.mark.e2e
def test_host_commands_see_the_lookalikes_and_the_passthrough(seen: Seen) -> None:
    for where, env in seen.homes().items():
        for name, value in LOOKALIKES.items():
            if name not in ("PATH", "PWD", "OLDPWD"):  # set by the shell or Osprey
                assert env.get(name) == value, (where, name)
        assert env.get("PASSED_TOKEN") == "passed-through-on-purpose", where
        assert "sk-broker-key-0123456789abcdef" not in "\n".join(env.values()), where

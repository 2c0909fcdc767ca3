"""`extension_manage` on real homes and real project trees: every operation and kind, the eight
error categories, the 256 KiB boundary, links and FIFOs, project collisions, concurrent replaces,
a write that fails between the provenance file and the artifact (in a child process whose file
size limit stops the artifact), and what discovery makes of an agent-written tool."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, cast

import pytest

from osprey.config import load_settings
from osprey.extensions.discovery import discover
from osprey.extensions.manage import CATEGORIES, LOCK_FILE, MAX_CONTENT_BYTES, ManageInput, manage, manage_tool
from osprey.extensions.provenance import ProvenanceRecord, read_provenance, sidecar
from osprey.extensions.report import sha256
from osprey.tools.base import ToolContext, ToolOutcome, ToolRegistry

BUILTIN = {"read_file", "write_file", "edit_file", "bash", "find_files", "grep", "list_directory", "tree"}
TOOL = '''name = "word_count"
description = "Counts whitespace-separated words."
command = ["./count.sh", "--json"]
timeout_secs = 30

[parameters.text]
type = "string"
description = "Text to count."
required = true
'''
HOOKS = '''[[hooks.PreToolUse]]
matcher = "bash|write_file"

[[hooks.PreToolUse.hooks]]
command = "./guard.sh"
timeout_secs = 10
'''
SKILL = "---\nname: review-rust\ndescription: Review Rust changes for correctness.\n---\n\nRead the changed Rust files.\n"
# kind, name, content, the file in the home
VALID: list[tuple[str, str | None, str, str]] = [
    ("tool", "word_count", TOOL, "tools/word_count.toml"),
    ("hooks", None, HOOKS, "hooks.toml"),
    ("skill", "review-rust", SKILL, "skills/review-rust/SKILL.md"),
    ("system_prompt", None, "You are a careful reviewer.\n", "SYSTEM.md"),
    ("append_system", None, "Always answer in English.\n", "APPEND_SYSTEM.md"),
]


class Home:
    """A workspace (a git root with a working directory) and an Osprey home; the tool of a session there."""

    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "repo"
        self.cwd = self.root / "pkg"
        self.cwd.mkdir(parents=True)
        (self.root / ".git").mkdir()
        self.home = tmp / "home"
        self.home.mkdir()
        self.changes = 0
        self.environ = {"OSPREY_HOME": str(self.home), "HOME": str(tmp), "OPENAI_API_KEY": "x"}

    @property
    def settings(self) -> Any:
        return load_settings(self.cwd, {}, self.environ)

    def call(self, **arguments: Any) -> ToolOutcome:
        """One call of the real tool, through a tool registry as a session makes it."""

        def changed() -> None:
            self.changes += 1

        registry = ToolRegistry()
        registry.add(manage_tool(self.settings, on_change=changed, builtin_tools=BUILTIN))
        return asyncio.run(registry.call("extension_manage", arguments, cast(ToolContext, None)))

    def ok(self, **arguments: Any) -> ToolOutcome:
        outcome = self.call(**arguments)
        assert not outcome.is_error, outcome.text
        return outcome

    def refused(self, category: str, **arguments: Any) -> ToolOutcome:
        before = self.changes
        outcome = self.call(**arguments)
        assert outcome.is_error and outcome.category == category, outcome.text
        assert outcome.text.startswith(f"Error ({category}): ")
        assert self.changes == before  # no reload is asked for after a refusal
        return outcome

    def listing(self, **arguments: Any) -> dict[str, Any]:
        return cast(dict[str, Any], json.loads(self.ok(operation="list", **arguments).text))

    def pair(self, relative: str) -> tuple[bytes | None, bytes | None]:
        """The bytes of an artifact and of its provenance file (None where there is none)."""
        path = self.home / relative
        side = sidecar(path)
        return (path.read_bytes() if path.exists() else None, side.read_bytes() if side.exists() else None)


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path)


def named(name: str | None) -> dict[str, str]:
    return {"name": name} if name is not None else {}


@pytest.mark.parametrize(("kind", "name", "content", "relative"), VALID, ids=[v[0] for v in VALID])
def test_create_replace_delete_each_kind(home: Home, kind: str, name: str | None, content: str, relative: str) -> None:
    path = home.home / relative
    created = home.ok(operation="create", kind=kind, content=content, **named(name))
    assert path.read_text() == content
    digest = sha256(content.encode())
    assert digest in created.text and "next turn boundary" in created.text
    assert ("osprey extensions trust" in created.text) == (kind in ("tool", "hooks"))
    record = ProvenanceRecord.model_validate_json(sidecar(path).read_bytes())
    assert (record.origin, record.digest, record.kind, record.activation) == ("agent", digest, kind, "next_turn")
    assert read_provenance(path, home.home)[0] == "agent"
    assert home.changes == 1

    new = content + ("# revised\n" if kind in ("tool", "hooks") else "Revised.\n")
    replaced = home.ok(operation="replace", kind=kind, content=new, expected_digest=digest, **named(name))
    assert path.read_text() == new and sha256(new.encode()) in replaced.text
    second = ProvenanceRecord.model_validate_json(sidecar(path).read_bytes())
    assert second.digest == sha256(new.encode()) and second.operation_id != record.operation_id
    assert home.changes == 2

    listed = home.listing(kind=kind)["artifacts"]
    assert [(a["kind"], a["path"], a["digest"], a["size"], a["provenance"]) for a in listed] == [
        (kind, str(path), sha256(new.encode()), len(new.encode()), "agent")]

    deleted = home.ok(operation="delete", kind=kind, expected_digest=sha256(new.encode()), **named(name))
    assert "Deleted" in deleted.text and "next turn boundary" in deleted.text
    assert not path.exists() and not sidecar(path).exists()
    assert home.changes == 3
    if kind == "skill":
        assert not path.parent.exists()  # the skill's directory went with its last file
    if kind == "tool":
        assert list(path.parent.iterdir()) == []  # nothing staged or set aside is left


def test_replace_and_delete_without_expected_digest_and_a_bare_hex_digest(home: Home) -> None:
    home.ok(operation="create", kind="append_system", content="one\n")
    home.ok(operation="replace", kind="append_system", content="two\n")
    bare = sha256(b"two\n").removeprefix("sha256:")
    home.ok(operation="delete", kind="append_system", expected_digest=bare)
    assert not (home.home / "APPEND_SYSTEM.md").exists()


def test_a_skill_directory_with_other_files_stays_after_delete(home: Home) -> None:
    home.ok(operation="create", kind="skill", name="review-rust", content=SKILL)
    (home.home / "skills" / "review-rust" / "notes.txt").write_text("kept")
    home.ok(operation="delete", kind="skill", name="review-rust")
    assert (home.home / "skills" / "review-rust" / "notes.txt").read_text() == "kept"
    assert not (home.home / "skills" / "review-rust" / "SKILL.md").exists()


def test_list_shows_metadata_never_bodies(home: Home) -> None:
    marker = "ZEBRA-MARKER-7731"
    for kind, name, content, _ in VALID:
        if kind in ("system_prompt", "append_system"):
            content = f"{content}{marker}\n"
        elif kind == "skill":
            content = content + marker + "\n"
        else:
            content = content + f"# {marker}\n"
        home.ok(operation="create", kind=kind, content=content, **named(name))
    (home.home / "tools" / "legacy_tool.toml").write_text(TOOL.replace("word_count", "legacy_tool") + f"# {marker}\n")
    listing = home.ok(operation="list")
    assert marker not in listing.text
    items = {a["name"]: a for a in json.loads(listing.text)["artifacts"]}
    assert set(items) == {"SYSTEM.md", "APPEND_SYSTEM.md", "hooks.toml", "word_count", "legacy_tool", "review-rust"}
    assert all(set(a) >= {"kind", "name", "path", "digest", "size", "provenance"} and "content" not in a for a in items.values())
    assert (items["word_count"]["provenance"], items["word_count"]["trust"], items["word_count"]["status"]) == ("agent", "untrusted", "inactive")
    assert (items["hooks.toml"]["trust"], items["hooks.toml"]["status"]) == ("untrusted", "inactive")
    assert (items["legacy_tool"]["provenance"], items["legacy_tool"]["trust"], items["legacy_tool"]["status"]) == ("legacy", "trusted", "active")
    assert "trust" not in items["SYSTEM.md"] and items["SYSTEM.md"]["status"] == "active"
    assert items["review-rust"]["digest"] == sha256((home.home / "skills/review-rust/SKILL.md").read_bytes())
    assert [a["name"] for a in home.listing(kind="tool", name="legacy_tool")["artifacts"]] == ["legacy_tool"]
    assert home.changes == 5  # list asks for no reload


def test_list_of_an_empty_or_missing_home(tmp_path: Path) -> None:
    h = Home(tmp_path)
    assert h.listing()["artifacts"] == []
    h.home.rmdir()
    assert h.listing()["artifacts"] == []


def test_discovery_reports_an_agent_written_tool_as_untrusted_and_inactive(home: Home) -> None:
    home.ok(operation="create", kind="tool", name="word_count", content=TOOL)
    home.ok(operation="create", kind="hooks", content=HOOKS)
    found = discover(home.settings, BUILTIN)
    tool = next(a for a in found.artifacts if a.kind == "tool")
    hooks = next(a for a in found.artifacts if a.kind == "hooks")
    assert (tool.layer, tool.provenance, tool.trust, tool.status) == ("user", "agent", "untrusted", "inactive")
    assert (hooks.provenance, hooks.trust, hooks.status) == ("agent", "untrusted", "inactive")
    assert found.tools == [] and found.hooks is None
    assert not (home.home / "trust.toml").exists()  # the manager never writes pins


def test_replacing_the_persons_own_tool_makes_it_need_trust(home: Home) -> None:
    path = home.home / "tools" / "word_count.toml"
    path.parent.mkdir()
    path.write_text(TOOL)
    assert next(a for a in discover(home.settings, BUILTIN).artifacts if a.kind == "tool").status == "active"
    outcome = home.ok(operation="replace", kind="tool", name="word_count", content=TOOL.replace("Counts", "Counts all"),
                      expected_digest=sha256(TOOL.encode()))
    assert "needs their trust again" in outcome.text
    tool = next(a for a in discover(home.settings, BUILTIN).artifacts if a.kind == "tool")
    assert (tool.provenance, tool.trust, tool.status) == ("agent", "untrusted", "inactive")


# ---------------------------------------------------------------------------------------------
# The eight categories


def test_invalid_names(home: Home) -> None:
    home.refused("invalid_name", operation="create", kind="tool", name="Word-Count", content=TOOL)
    home.refused("invalid_name", operation="create", kind="tool", name="x" * 65, content=TOOL)
    home.refused("invalid_name", operation="create", kind="tool", name="../escape", content=TOOL)
    home.refused("invalid_name", operation="create", kind="tool", content=TOOL)
    text = home.refused("invalid_name", operation="create", kind="tool", name="bash", content=TOOL.replace("word_count", "bash")).text
    assert "built-in" in text
    home.refused("invalid_name", operation="create", kind="tool", name="extension_manage", content=TOOL)
    home.refused("invalid_name", operation="create", kind="skill", name="Review_Rust", content=SKILL)
    home.refused("invalid_name", operation="create", kind="skill", name="review--rust", content=SKILL)
    home.refused("invalid_name", operation="create", kind="skill", name="ns:review-rust", content=SKILL)
    home.refused("invalid_name", operation="create", kind="system_prompt", name="SYSTEM.md", content="x")
    home.refused("invalid_name", operation="delete", kind="hooks", name="hooks")
    assert list(home.home.iterdir()) == []


def test_a_skill_in_the_yaml_other_agents_write_is_accepted(home: Home) -> None:
    folded = SKILL.replace("description: Review Rust changes for correctness.",
                           "description: >-\n  Review Rust changes\n  for correctness.\nlicense: Apache-2.0\nmetadata:\n  version: 2\nallowed-tools: [Read, Grep]")
    outcome = home.call(operation="create", kind="skill", name="review-rust", content=folded)
    assert not outcome.is_error, outcome.text


@pytest.mark.parametrize(("kind", "name", "content", "reason"), [
    ("tool", "word_count", "name = \"word_count\"\ndescription = ", "not valid TOML"),
    ("tool", "word_count", TOOL.replace('command = ["./count.sh", "--json"]\n', ""), "command"),
    ("tool", "word_count", TOOL + "colour = \"red\"\n", "unknown key"),
    ("tool", "word_count", TOOL.replace('name = "word_count"', 'name = "other"'), "declares name"),
    ("hooks", None, HOOKS.replace("bash|write_file", "bash("), "hooks file is not valid"),
    ("hooks", None, "[[hooks.Teatime]]\n", "hooks file is not valid"),
    ("skill", "review-rust", "Just instructions, no frontmatter.\n", "frontmatter"),
    ("skill", "review-rust", SKILL.replace("description: Review Rust changes for correctness.\n", ""), "no description"),
    ("skill", "review-rust", SKILL.replace("name: review-rust", "name: review-go"), "does not match its directory"),
    ("skill", "review-rust", SKILL.replace("name: review-rust", "name: Review"), "not valid"),
    ("skill", "review-rust", SKILL.replace("Review Rust changes for correctness.", "d" * 1025), "at most 1024"),
    ("skill", "review-rust", SKILL.replace("description: Review Rust changes for correctness.", "description: [a, list]"), "not text"),
    ("skill", "review-rust", "---\nname: review-rust\ndescription: x\n", "closing"),
    ("system_prompt", None, "  \n", "empty"),
], ids=["toml", "no-command", "unknown-key", "name-mismatch", "regex", "event", "no-frontmatter", "no-description", "dir-mismatch",
        "bad-skill-name", "long-description", "list-description", "unclosed", "empty-prompt"])
def test_each_parser_rejects_bad_content(home: Home, kind: str, name: str | None, content: str, reason: str) -> None:
    text = home.refused("invalid_content", operation="create", kind=kind, content=content, **named(name)).text
    assert reason in text
    assert [p for p in home.home.rglob("*") if p.is_file() and p.name != LOCK_FILE] == []


def test_a_namespaced_skill_name_and_a_quoted_description_are_accepted(home: Home) -> None:
    content = "---\nname: team:review-rust\ndescription: \"Review: Rust\"\nlicense: MIT\n---\nBody\n"
    home.ok(operation="create", kind="skill", name="review-rust", content=content)
    content = "---\nname: review-rust\ndescription: " + "d" * 1024 + "\n---\n"
    home.ok(operation="replace", kind="skill", name="review-rust", content=content)


def test_the_256_kib_boundary(home: Home) -> None:
    exact = "a" * (MAX_CONTENT_BYTES - 1) + "\n"
    home.ok(operation="create", kind="append_system", content=exact)
    assert (home.home / "APPEND_SYSTEM.md").stat().st_size == MAX_CONTENT_BYTES
    over = home.refused("invalid_content", operation="replace", kind="append_system", content=exact + "b").text
    assert "256 KiB" in over
    wide = "é" * (MAX_CONTENT_BYTES // 2 + 1)  # fewer characters than the limit, more bytes
    assert "bytes of UTF-8" in home.refused("invalid_content", operation="replace", kind="append_system", content=wide).text
    assert (home.home / "APPEND_SYSTEM.md").read_text() == exact


def test_nul_bytes_are_refused(home: Home) -> None:
    assert "NUL" in home.refused("invalid_content", operation="create", kind="system_prompt", content="before\x00after").text
    assert not (home.home / "SYSTEM.md").exists()


@pytest.mark.parametrize("content", [
    "export GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789\n",
    'api_key = "k3y9f8a7s6d5f4g3"\n',
    "Use sk-proj-abcdefghijklmnopqrstuv as the key.\n",
    "Fetch from https://deploy:hunter2@example.org/repo.git\n",
    "curl -H 'Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345' https://api\n",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
    '{"password": "correct8horse9battery"}\n',
], ids=["github", "api-key", "openai", "url-password", "bearer", "private-key", "json"])
def test_secrets_are_refused_and_not_repeated(home: Home, content: str) -> None:
    text = home.refused("invalid_content", operation="create", kind="append_system", content=content).text
    assert "credential" in text or "private key" in text or "bearer token" in text
    for secret in ("ghp_abc", "k3y9f8", "sk-proj", "hunter2", "abcdefghijklmnopqrstuvwxyz012345", "b3BlbnNz", "correct8horse"):
        assert secret not in text
    assert not (home.home / "APPEND_SYSTEM.md").exists()


def test_text_that_only_mentions_credentials_is_accepted(home: Home) -> None:
    content = ("Set OPENAI_API_KEY=$OPENAI_API_KEY before running.\nmax_tokens = 4096\nOSPREY_MODEL=claude-3-5-sonnet-20241022\n"
               "password: <your password>\nsort_key = \"modification_time\"\nAuthorization: Bearer $TOKEN\n")
    home.ok(operation="create", kind="append_system", content=content)


def test_already_exists_and_not_found(home: Home) -> None:
    home.ok(operation="create", kind="tool", name="word_count", content=TOOL)
    text = home.refused("already_exists", operation="create", kind="tool", name="word_count", content=TOOL).text
    assert sha256(TOOL.encode()) in text
    # another file of the user layer already defines the name
    (home.home / "tools" / "words.toml").write_text(TOOL.replace("word_count", "word_total"))
    home.refused("already_exists", operation="create", kind="tool", name="word_total", content=TOOL.replace("word_count", "word_total"))
    for kind, name, content, _ in VALID:
        if kind != "tool":
            home.refused("not_found", operation="replace", kind=kind, content=content, **named(name))
            home.refused("not_found", operation="delete", kind=kind, **named(name))
    home.refused("not_found", operation="delete", kind="tool", name="nothing_here")


def test_stale_revision_writes_nothing(home: Home) -> None:
    home.ok(operation="create", kind="hooks", content=HOOKS)
    before = home.pair("hooks.toml")
    wrong = sha256(b"something else")
    text = home.refused("stale_revision", operation="replace", kind="hooks", content=HOOKS + "\n", expected_digest=wrong).text
    assert sha256(HOOKS.encode()) in text
    home.refused("stale_revision", operation="delete", kind="hooks", expected_digest=wrong)
    assert home.pair("hooks.toml") == before


def test_unsupported_operations(home: Home) -> None:
    home.refused("unsupported_operation", operation="read", kind="system_prompt")
    assert "does not manage" in home.refused("unsupported_operation", operation="create", kind="toolsets", content="[toolsets]\n").text
    home.refused("unsupported_operation", operation="create", content="x")
    home.refused("unsupported_operation", operation="create", kind="system_prompt", content="x", expected_digest=sha256(b"x"))
    home.ok(operation="create", kind="system_prompt", content="x")
    home.refused("unsupported_operation", operation="delete", kind="system_prompt", content="x")
    home.refused("unsupported_operation", operation="list", content="x")
    assert (home.home / "SYSTEM.md").read_text() == "x"
    # what the schema already says is refused before the tool runs
    outcome = home.call(operation="create", kind="system_prompt", content="y", colour="red")
    assert outcome.category == "invalid_arguments"
    assert home.call(operation="delete", kind="system_prompt", expected_digest="abc").category == "invalid_arguments"


def test_storage_unavailable_when_the_home_is_not_a_directory(tmp_path: Path) -> None:
    h = Home(tmp_path)
    h.home.rmdir()
    h.home.write_text("a file where the home should be")
    h.refused("storage_unavailable", operation="create", kind="system_prompt", content="x")
    assert h.home.read_text() == "a file where the home should be"


def test_a_symbolic_link_target_is_refused(home: Home, tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("the person's file")
    (home.home / "SYSTEM.md").symlink_to(outside)
    text = home.refused("storage_unavailable", operation="replace", kind="system_prompt", content="x").text
    assert "symbolic link" in text
    home.refused("storage_unavailable", operation="create", kind="system_prompt", content="x")
    home.refused("storage_unavailable", operation="delete", kind="system_prompt")
    assert outside.read_text() == "the person's file" and (home.home / "SYSTEM.md").is_symlink()
    # a linked directory on the way is not written through either
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (home.home / "tools").symlink_to(elsewhere)
    assert "symbolic link" in home.refused("storage_unavailable", operation="create", kind="tool", name="word_count", content=TOOL).text
    assert list(elsewhere.iterdir()) == []
    listed = {a["name"]: a for a in home.listing()["artifacts"]}
    assert "symbolic link" in listed["SYSTEM.md"]["problem"] and "digest" not in listed["SYSTEM.md"]


def test_a_fifo_target_is_refused_without_blocking(home: Home) -> None:
    os.mkfifo(home.home / "APPEND_SYSTEM.md")
    text = home.refused("storage_unavailable", operation="replace", kind="append_system", content="x").text
    assert "not a regular file" in text
    home.refused("storage_unavailable", operation="create", kind="append_system", content="x")
    home.refused("storage_unavailable", operation="delete", kind="append_system")
    assert "not a regular file" in home.listing()["artifacts"][0]["problem"]


def test_the_sidecar_path_taken_by_a_directory_leaves_the_old_pair_intact(home: Home) -> None:
    home.ok(operation="create", kind="tool", name="word_count", content=TOOL)
    side = sidecar(home.home / "tools" / "word_count.toml")
    old_record = side.read_bytes()
    side.unlink()
    side.mkdir()  # the provenance file cannot be written
    (side / "inside").write_bytes(old_record)
    new = TOOL.replace("Counts", "Counts all")
    home.refused("storage_unavailable", operation="replace", kind="tool", name="word_count", content=new)
    home.refused("storage_unavailable", operation="delete", kind="tool", name="word_count")
    assert (home.home / "tools" / "word_count.toml").read_text() == TOOL
    assert side.is_dir() and (side / "inside").read_bytes() == old_record
    assert sorted(p.name for p in (home.home / "tools").iterdir()) == ["word_count.toml", side.name]  # no staged files left


CHILD = """
import json, os, sys, time
from pathlib import Path
from osprey.config import load_settings
from osprey.extensions.manage import ManageInput, manage
settings = load_settings(Path(sys.argv[1]), {}, json.loads(sys.argv[2]))
if len(sys.argv) > 4:  # start together: when the file appears
    print("ready", flush=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(sys.argv[4]) and time.monotonic() < deadline:
        pass
outcome, changed = manage(settings, ManageInput.model_validate_json(sys.argv[3]))
print(json.dumps({"text": outcome.text, "category": outcome.category, "changed": changed}))
"""


# The child limits its own file size before it does anything else. (A preexec_fn would run in a
# fork of this process, which may hold gRPC's threads from earlier tests: their fork handlers can
# abort the child.)
LIMITED_CHILD = """
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
""" + CHILD


def test_a_failed_artifact_write_after_the_provenance_write_restores_the_old_pair(home: Home) -> None:
    """The child's file size limit lets the provenance file through and stops the artifact."""
    home.ok(operation="create", kind="append_system", content="old text\n")
    before = home.pair("APPEND_SYSTEM.md")
    request = ManageInput(operation="replace", kind="append_system", content="new text " * 1000, expected_digest=sha256(b"old text\n"))
    env = {**os.environ, **home.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    run = subprocess.run([sys.executable, "-c", LIMITED_CHILD, str(home.cwd), json.dumps(home.environ), request.model_dump_json()],
                         capture_output=True, text=True, env=env, timeout=120, check=True)
    result = json.loads(run.stdout)
    assert result["category"] == "storage_unavailable" and not result["changed"], result
    assert "previous file and its provenance are kept" in result["text"]
    assert home.pair("APPEND_SYSTEM.md") == before
    assert sorted(p.name for p in home.home.iterdir()) == [LOCK_FILE, "APPEND_SYSTEM.md", "APPEND_SYSTEM.md.provenance.json"]
    # a new artifact whose write fails leaves no provenance file behind
    request = ManageInput(operation="create", kind="system_prompt", content="big " * 2000)
    run = subprocess.run([sys.executable, "-c", LIMITED_CHILD, str(home.cwd), json.dumps(home.environ), request.model_dump_json()],
                         capture_output=True, text=True, env=env, timeout=120, check=True)
    assert json.loads(run.stdout)["category"] == "storage_unavailable"
    assert not (home.home / "SYSTEM.md").exists() and not sidecar(home.home / "SYSTEM.md").exists()


def test_concurrent_replaces_with_the_same_digest_one_wins(home: Home) -> None:
    home.ok(operation="create", kind="system_prompt", content="base\n")
    digest = sha256(b"base\n")
    settings = home.settings
    barrier = threading.Barrier(2)
    results: dict[str, ToolOutcome] = {}

    def replace(text: str) -> None:
        barrier.wait()
        results[text] = manage(settings, ManageInput(operation="replace", kind="system_prompt", content=text, expected_digest=digest))[0]

    threads = [threading.Thread(target=replace, args=(f"version {n}\n",)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    categories = sorted(str(outcome.category) for outcome in results.values())
    assert categories == ["None", "stale_revision"], [o.text for o in results.values()]
    winner = next(text for text, outcome in results.items() if not outcome.is_error)
    assert (home.home / "SYSTEM.md").read_text() == winner
    assert ProvenanceRecord.model_validate_json(sidecar(home.home / "SYSTEM.md").read_bytes()).digest == sha256(winner.encode())


def test_concurrent_replaces_from_two_processes_one_wins(home: Home) -> None:
    home.ok(operation="create", kind="append_system", content="base\n")
    env = {**os.environ, **home.environ}
    go = home.root / "go"
    children = [
        subprocess.Popen([sys.executable, "-c", CHILD, str(home.cwd), json.dumps(home.environ),
                          ManageInput(operation="replace", kind="append_system", content=f"process {n}\n",
                                      expected_digest=sha256(b"base\n")).model_dump_json(), str(go)],
                         stdout=subprocess.PIPE, text=True, env=env)
        for n in (1, 2)
    ]
    for child in children:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
    go.touch()
    results = [json.loads(child.communicate(timeout=120)[0].strip().splitlines()[-1]) for child in children]
    assert sorted(str(r["category"]) for r in results) == ["None", "stale_revision"], results
    winner = next(n for n, r in zip((1, 2), results, strict=True) if r["category"] is None)
    assert (home.home / "APPEND_SYSTEM.md").read_text() == f"process {winner}\n"


# ---------------------------------------------------------------------------------------------
# Project collisions


def test_project_collisions_are_refused_for_tools_and_system_prompt_but_not_hooks(home: Home) -> None:
    project = home.root / ".osprey"  # the farther project layer: it still hides the user's
    (project / "tools").mkdir(parents=True)
    (project / "SYSTEM.md").write_text("project prompt")
    (project / "hooks.toml").write_text(HOOKS)
    (project / "APPEND_SYSTEM.md").write_text("project append")
    (project / "tools" / "counting.toml").write_text(TOOL)  # declares word_count under another file name
    (project / "tools" / "lint.toml").write_text("not even TOML [")  # its file name still claims `lint`
    assert "name_collision" in home.refused("name_collision", operation="create", kind="system_prompt", content="x").text
    home.ok(operation="create", kind="hooks", content=HOOKS)  # a project's hooks run beside the user's: no collision
    assert "counting.toml" in home.refused("name_collision", operation="create", kind="tool", name="word_count", content=TOOL).text
    home.refused("name_collision", operation="create", kind="tool", name="lint", content=TOOL.replace("word_count", "lint"))
    home.ok(operation="create", kind="append_system", content="user append")  # appends coexist
    home.ok(operation="create", kind="tool", name="other_tool", content=TOOL.replace("word_count", "other_tool"))
    home.ok(operation="create", kind="skill", name="review-rust", content=SKILL)
    # a user file made before the project's: replacing it is refused, deleting it is not
    (project / "SYSTEM.md").unlink()
    home.ok(operation="create", kind="system_prompt", content="mine")
    (home.cwd / ".osprey").mkdir()
    (home.cwd / ".osprey" / "SYSTEM.md").write_text("nearest")
    home.refused("name_collision", operation="replace", kind="system_prompt", content="mine again")
    home.ok(operation="delete", kind="system_prompt")


def test_the_tool_schema_and_flags(home: Home) -> None:
    tool = manage_tool(home.settings, on_change=lambda: None)
    assert tool.name == "extension_manage" and not tool.read_only and not tool.trusted
    properties = tool.parameters["properties"]
    assert properties["operation"]["enum"] == ["create", "replace", "delete", "list"]
    assert properties["kind"]["enum"] == ["skill", "system_prompt", "append_system", "tool", "hooks"]
    assert properties["kind"]["type"] == "string" and "anyOf" not in properties["kind"]
    assert tool.parameters["required"] == ["operation"]
    assert len(CATEGORIES) == 8

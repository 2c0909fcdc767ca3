"""What memory refuses: known instruction injections (tests/data/memory_injections.txt) all refused,
realistic durable notes (tests/data/memory_benign.txt) stored, credentials refused, and every check
bounded in time on hostile input."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from osprey.memory.base import MemoryStoreError
from osprey.memory.builtin import BuiltinMemory
from osprey.memory.safety import MAX_CHECKED, secret, unsafe

DATA = Path(__file__).parent / "data"
_ESCAPE = re.compile(r"\\(n|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})")


def load(name: str) -> list[str]:
    """The entries of a data file: blank and `#` lines skipped, `\\n`, `\\uXXXX` and `\\UXXXXXXXX` decoded."""
    lines = (DATA / name).read_text(encoding="utf-8").splitlines()
    return [_ESCAPE.sub(lambda m: "\n" if m[1] == "n" else chr(int(m[1][1:], 16)), line)
            for line in lines if line.strip() and not line.startswith("#")]


INJECTIONS = load("memory_injections.txt")
BENIGN = load("memory_benign.txt")


def test_the_data_files_hold_at_least_forty_distinct_strings_each() -> None:
    assert len(INJECTIONS) >= 40 and len(set(INJECTIONS)) == len(INJECTIONS)
    assert len(BENIGN) >= 40 and len(set(BENIGN)) == len(BENIGN)
    assert any("\u200b" in s for s in INJECTIONS) and any("\n" in s for s in INJECTIONS)  # the escapes are decoded


async def test_every_injection_is_refused_and_at_most_two_benign_notes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = BuiltinMemory(tmp_path / "memory", memory_char_limit=100_000)
    injections_refused = []
    for text in INJECTIONS:
        try:
            await store.add(text)
        except MemoryStoreError as exc:
            injections_refused.append(text)
            assert "refused" in str(exc)
    assert not (tmp_path / "memory" / "MEMORY.md").exists()  # nothing of them was written
    benign_refused = []
    for text in BENIGN:
        try:
            await store.add(text)
        except MemoryStoreError as exc:
            benign_refused.append(f"{text!r}: {exc}")
    stored = await store.recall("the")
    with capsys.disabled():
        print(f"\nmemory safety: injections refused {len(injections_refused)}/{len(INJECTIONS)} "
              f"({len(injections_refused) / len(INJECTIONS):.0%}); benign notes refused {len(benign_refused)}/{len(BENIGN)} "
              f"({len(benign_refused) / len(BENIGN):.0%})")
    assert [t for t in INJECTIONS if t not in injections_refused] == []
    assert len(benign_refused) <= 2, benign_refused
    assert stored  # the benign notes were written and read back


@pytest.mark.parametrize("text", INJECTIONS)
def test_each_injection_is_named_unsafe(text: str) -> None:
    assert unsafe(text) is not None


@pytest.mark.parametrize("char", ["\u200b", "\u200d", "\u200e", "\u202e", "\u2066", "\u2069", "\ufeff", "\U000e0041", "\x1b", "\r", "\x00", "\x85"])
def test_hidden_and_control_characters_are_unsafe(char: str) -> None:
    assert unsafe(f"User prefers{char} tabs.") is not None


def test_tabs_newlines_and_ordinary_unicode_are_safe() -> None:
    assert unsafe("Tests:\n\tpytest -q\nCafé, naïve, 日本語, emoji 🦅, arrows → ←") is None


@pytest.mark.parametrize("text", [
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA",
    "OPENAI_API_KEY is sk-proj-4f9Qb2LkT7xVw1ZpR8sN3mYc",
    "ANTHROPIC_API_KEY=sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv",
    "gh token ghp_0123456789abcdefghijABCDEFGHIJ012345",
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
    "AWS key AKIAIOSFODNN7EXAMPLE",
    "slack xoxb-123456789012-abcdefABCDEF",
    "password = Tr0ub4dor&3xyzzy1234567",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
])
def test_obvious_secrets_are_named(text: str) -> None:
    assert secret(text) is not None


@pytest.mark.parametrize("text", [
    "The GitHub token comes from GITHUB_TOKEN in CI; locally from gh auth token.",
    "TOKEN=$GITHUB_TOKEN is exported by the workflow.",
    "password: see the 1Password entry 'staging db'",
    "Uses scikit-learn and task-runner scripts.",
    "The key format is sk-<project>-<random>.",
])
def test_mentions_of_secrets_are_not_secrets(text: str) -> None:
    assert secret(text) is None


HOSTILE = {
    "repeated verbs": "ignore " * 14_000,
    "repeated words": "a " * 49_000,
    "a long download line": "curl " + "x" * 99_000,
    "repeated downloads": "curl x " * 14_000,
    "half role tags": "<|" * 49_000,
    "an open image link": "![" + "a" * 99_000,
    "an image address": "![a](http://" + "a?" * 49_000,
    "key prefixes": "sk-" * 33_000,
    "an endless assignment": "password=" + "a" * 99_000,
    "repeated headings": "\n### " * 24_000,
    "repeated sends": "send the " * 11_000,
    "repeated identities": "you are " * 12_000,
    "open comments": "<!--" * 24_000,
    "repeated appends": "append " * 14_000,
    "repeated command substitutions": "$(" * 49_000,
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_checks_stay_fast_on_hostile_input(text: str) -> None:
    text = text[:MAX_CHECKED]
    started = time.perf_counter()
    unsafe(text)
    secret(text)
    assert time.perf_counter() - started < 3.0  # about 0.2 s here; a backtracking pattern takes far longer


def test_text_too_long_to_check_is_unsafe() -> None:
    assert unsafe("a" * (MAX_CHECKED + 1)) == f"is longer than {MAX_CHECKED:,} characters, too long to check"

"""Session search over 1,000 sessions written through the real journal (each with a prompt, an
answer and three tool calls whose results are a few KB): every session's own word finds it and
it alone, in the right kind of event; words shared by many sessions are bounded by the limit and
the workspace; the results are the same after the index is made again from the events. (How fast
a query is: bench/session_search.py.)"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest
from test_session_search import Saved, drop_index, write

from osprey.sessions.journal import journal_path
from osprey.sessions.search import search

SESSIONS = 1000
WORKSPACES = 4
KINDS = ("prompt", "answer", "tool_call", "tool_result")


def filler(rng: random.Random, words: int) -> str:
    return " ".join(f"{rng.choice('bcdfgklmnprstvz')}{rng.choice('aeiou')}{rng.choice('nrstl')}{rng.randrange(100)}" for _ in range(words))


def corpus(root: Path) -> list[Saved]:
    """Session n has its own word `uniq<n>` in one kind of event (n % 4); every 10th session has
    `decile`; each one's result texts are a few KB."""
    rng = random.Random(23)
    sessions = []
    for n in range(SESSIONS):
        own = f"uniq{n:04d}"
        parts = {kind: filler(rng, 12) for kind in KINDS}
        parts[KINDS[n % 4]] += f" {own}"
        shared = " decile" if n % 10 == 0 else ""
        outputs = [filler(rng, 500) for _ in range(3)]
        outputs[2] += " " + parts["tool_result"]
        calls = tuple((name, {"command": f"{name} {parts['tool_call'] if i == 0 else filler(rng, 4)}"}, outputs[i])
                      for i, name in enumerate(("bash", "grep", "read_file")))
        sessions.append(Saved(f"s{n:04d}", str(root / f"ws{n % WORKSPACES}" / f"d{n}"), parts["prompt"] + shared,
                              answer=parts["answer"], calls=calls, ts=1_700_000_000.0 + 60 * n))
    return sessions


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("scale")
    path = journal_path(root / "home")
    write(path, *corpus(root))
    return path, root


def test_every_sessions_own_word_finds_it_alone_in_the_right_event(journal: tuple[Path, Path]) -> None:
    path, _ = journal
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(DISTINCT session_id) FROM search_rows").fetchone()[0] == SESSIONS
    for n in range(SESSIONS):
        hits = search(path, f"uniq{n:04d}").hits
        assert [(h.session_id, h.kind) for h in hits] == [(f"s{n:04d}", KINDS[n % 4])], n


def test_shared_words_are_bounded_by_the_limit_and_the_workspace(journal: tuple[Path, Path]) -> None:
    path, root = journal
    everywhere = search(path, "decile", limit=200).hits
    assert sorted(h.session_id for h in everywhere) == [f"s{n:04d}" for n in range(0, SESSIONS, 10)]
    # Prompts of 13 words (those of n % 4 == 2) rank above those of 14; equal ranks, newest first.
    assert [h.session_id for h in everywhere] == [f"s{n:04d}" for m in (2, 0) for n in range(SESSIONS - 10, -1, -10) if n % 4 == m]
    assert len(search(path, "decile", limit=7).hits) == 7
    ws2 = search(path, "decile", workspace=root / "ws2", limit=200).hits
    assert sorted(h.session_id for h in ws2) == [f"s{n:04d}" for n in range(0, SESSIONS, 10) if n % WORKSPACES == 2]
    common = search(path, "bash", limit=200).hits  # every session's first call
    assert len(common) == 200 and all(h.kind == "tool_call" for h in common)


def test_an_index_made_again_from_the_events_gives_the_same_results(journal: tuple[Path, Path]) -> None:
    path, root = journal
    queries = ["decile", "uniq0007", "uniq0999", "bash grep"]
    before = [search(path, q, limit=200).hits for q in queries]
    drop_index(path)
    assert search(path, "uniq0007", backfill_budget=0).unindexed == SESSIONS * 9
    after = [search(path, q, limit=200, backfill_budget=120).hits for q in queries]
    assert after == before

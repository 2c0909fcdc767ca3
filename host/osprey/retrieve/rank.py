"""Ranking passages for a query: BM25 by SQLite's FTS5 (its `bm25()` function), and, when an
OpenAI-compatible embeddings endpoint is configured, cosine similarity of embeddings fused with
BM25 by reciprocal rank fusion.

The index holds each passage twice: in `whole`, identifiers such as `test_parse_header` and
`foo.bar` are one token (the `unicode61` tokenizer with `_` and `.` as token characters); in
`parts`, they are split into their words. A query matches both, its words quoted as FTS5 strings,
so nothing from a query is read as FTS5 syntax."""

from __future__ import annotations

import math
import re
import sqlite3
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, ValidationError

from .passages import Passage

if TYPE_CHECKING:
    import httpx

MAX_QUERY_TERMS = 64
MAX_TERM_CHARS = 100
INDEX_SECONDS = 60.0  # building one index, at most
WHOLE_WEIGHT, PARTS_WEIGHT = 2.0, 1.0
RRF_K = 60
EMBED_ALL_MAX = 2_000  # outputs with more passages embed only BM25's best EMBED_CANDIDATES
EMBED_CANDIDATES = 200
EMBED_BATCH = 64
EMBED_TEXT_CHARS = 8_000
EMBED_SECONDS = 60.0  # the embeddings of one retrieve call, at most
EMBED_MAX_RESPONSE_BYTES = 64 * 1024 * 1024

_LONE_DOT = re.compile(r"(?<!\w)\.|\.(?!\w)")
_JOINERS = re.compile(r"[_.]")
_WHOLE = re.compile(r"\w+(?:\.\w+)*")
_PART = re.compile(r"[^\W_]+")


class QueryError(ValueError):
    """A query with nothing to search for."""


class IndexError_(RuntimeError):
    """The index of an output could not be built in time."""


def _whole_text(text: str) -> str:
    return _LONE_DOT.sub(" ", text)


def _parts_text(text: str) -> str:
    return _JOINERS.sub(" ", text)


def fts_query(query: str) -> str:
    """The FTS5 query for `query`: each compound identifier as one term of `whole`, each word as
    a term of `parts`, every term an FTS5 string (quotes doubled), all joined by OR."""
    terms: list[str] = []
    seen: set[str] = set()

    def add(column: str, token: str) -> None:
        token = token.lower()[:MAX_TERM_CHARS]
        key = f"{column}:{token}"
        if token and key not in seen and len(terms) < MAX_QUERY_TERMS:
            seen.add(key)
            terms.append(f'{column} : "{token.replace(chr(34), chr(34) * 2)}"')

    for whole in _WHOLE.findall(query):
        if _JOINERS.search(whole):
            add("whole", whole)
        for part in _PART.findall(whole):
            add("parts", part)
    if not terms:
        raise QueryError("the query holds no words to search for: give words from the output, such as a test's name or an error message")
    return " OR ".join(terms)


class LexicalIndex:
    """An in-memory FTS5 index of one output's passages."""

    def __init__(self, passages: Sequence[Passage], *, seconds: float = INDEX_SECONDS) -> None:
        self.passages = list(passages)
        self._conn = sqlite3.connect(":memory:", check_same_thread=False)
        self._conn.execute("CREATE VIRTUAL TABLE p USING fts5(whole, parts, content='', tokenize=\"unicode61 tokenchars '_.'\")")
        deadline = time.monotonic() + seconds
        self._conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 100_000)
        try:
            with self._conn:
                self._conn.executemany("INSERT INTO p (rowid, whole, parts) VALUES (?, ?, ?)",
                                       ((i, _whole_text(p.text), _parts_text(p.text)) for i, p in enumerate(self.passages)))
        except sqlite3.OperationalError as exc:
            self._conn.close()
            raise IndexError_(f"the output could not be indexed within {seconds:.0f} s ({exc}); it is too large to search") from None
        finally:
            self._conn.set_progress_handler(None, 0)

    def search(self, query: str, limit: int) -> list[tuple[int, float]]:
        """The best `limit` passages for `query` as (passage index, BM25 score, higher is better)."""
        match = fts_query(query)
        rows = self._conn.execute(f"SELECT rowid, bm25(p, {WHOLE_WEIGHT}, {PARTS_WEIGHT}) AS score FROM p WHERE p MATCH ? "
                                  "ORDER BY score LIMIT ?", (match, limit)).fetchall()
        return [(int(rowid), -float(score)) for rowid, score in rows]

    def close(self) -> None:
        self._conn.close()


# ---------------------------------------------------------------------------------------------
# Embeddings


class EmbeddingsError(Exception):
    """The embeddings endpoint failed; the message says how."""


class _Item(BaseModel):
    model_config = ConfigDict(extra="ignore")
    embedding: list[float]
    index: int | None = None


class _EmbeddingsResponse(BaseModel):
    model_config = ConfigDict(extra="ignore")
    data: list[_Item]


def endpoint(url: str) -> str:
    """The embeddings endpoint of `url`: the URL itself when it ends in /embeddings, else that path under it."""
    url = url.rstrip("/")
    return url if url.endswith("/embeddings") else url + "/embeddings"


async def embed(http: httpx.AsyncClient, url: str, model: str, api_key: str | None, texts: Sequence[str],
                *, batch: int = EMBED_BATCH, timeout: float = 30.0) -> list[list[float]]:
    """The embeddings of `texts` (each cut to EMBED_TEXT_CHARS), `batch` texts a request."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    out: list[list[float]] = []
    target = endpoint(url)
    for start in range(0, len(texts), batch):
        chunk = [t[:EMBED_TEXT_CHARS] or " " for t in texts[start:start + batch]]
        try:
            response = await http.post(target, json={"model": model, "input": chunk}, headers=headers, timeout=timeout)
        except httpx.HTTPError as exc:
            raise EmbeddingsError(f"the embeddings endpoint {target} could not be reached: {type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            raise EmbeddingsError(f"the embeddings endpoint {target} answered HTTP {response.status_code}: {response.text[:200]}")
        if len(response.content) > EMBED_MAX_RESPONSE_BYTES:
            raise EmbeddingsError(f"the embeddings endpoint {target} answered more than {EMBED_MAX_RESPONSE_BYTES:,} bytes")
        try:
            parsed = _EmbeddingsResponse.model_validate_json(response.content)
        except ValidationError as exc:
            raise EmbeddingsError(f"the embeddings endpoint {target} answered something other than embeddings: {exc.errors()[0]['msg']}") from None
        items = sorted(parsed.data, key=lambda item: item.index if item.index is not None else 0) \
            if all(item.index is not None for item in parsed.data) else parsed.data
        if len(items) != len(chunk) or any(not item.embedding for item in items):
            raise EmbeddingsError(f"the embeddings endpoint {target} answered {len(items)} embeddings for {len(chunk)} texts")
        out.extend(item.embedding for item in items)
    return out


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) != len(b):
        return 0.0
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def fuse(*rankings: Sequence[int], k: int = RRF_K) -> list[int]:
    """Reciprocal rank fusion of rankings (lists of passage indexes, best first)."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank + 1)
    return sorted(scores, key=lambda item: (-scores[item], item))

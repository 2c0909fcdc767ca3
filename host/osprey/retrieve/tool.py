"""The `retrieve` tool and the registry's hook that keeps cut tool results for it."""

from __future__ import annotations

import asyncio
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from ..tools.base import Invocation, Tool, ToolContext, ToolInput, ToolOutcome, ToolSource
from .store import OutputStore, RetrieveError

if TYPE_CHECKING:
    import httpx

    from ..config.schema import ResolvedRetrieve
    from .rank import LexicalIndex

TOOL_NAME = "retrieve"
MAX_LIMIT = 20
PASSAGE_OVERHEAD = 80  # a passage's heading and cut note, at most
MIN_SHARE = 300  # characters of a passage at least, when several are shown
INDEXES_KEPT = 3  # the indexes of this many outputs stay in memory (the most recently searched)

DESCRIPTION = (
    "Search the whole output of an earlier tool result that was cut to fit (the result names it with a line "
    "`retrieve handle: ID`). Returns the passages of that output most relevant to the query, best first, each with "
    "its line range in the kept output. Use words that appear in the output: a test's name, an error message, an "
    "identifier, a file name. Handles are valid in this session only."
)


class RetrieveInput(ToolInput):
    handle: str = Field(min_length=1, max_length=100, description="The handle named under a cut tool result, such as r1.")
    query: str = Field(min_length=1, max_length=2000, description="Words to look for: a test name, an error message, an identifier.")
    limit: int = Field(5, ge=1, le=MAX_LIMIT, description="At most this many passages.")


class RetrieveTools(ToolSource):
    """`retrieve` over the outputs session `session_id` kept under `home`, and `keep`, the
    ToolRegistry hook that keeps a cut result and returns its handle."""

    name = TOOL_NAME

    def __init__(self, settings: ResolvedRetrieve, home: Path, session_id: str, *, max_chars: int,
                 http: httpx.AsyncClient | None = None, journal: Path | None = None, offered: Callable[[], bool] | None = None) -> None:
        self.settings = settings
        self._offered = offered  # whether the model has the tool now (a toolset or a child's subset may leave it out)
        try:
            self.store: OutputStore | None = OutputStore(home, session_id, max_output_bytes=settings.max_output_bytes,
                                                         max_session_bytes=settings.max_session_bytes)
        except ValueError:
            self.store = None  # a session id that cannot name a directory: nothing is kept
        self.home = home
        self.max_chars = max_chars
        self._http = http
        self._journal = journal  # a lead session sweeps the results of sessions the journal no longer holds
        self._indexes: OrderedDict[str, LexicalIndex] = OrderedDict()
        self._embeddings: dict[str, dict[int, array[float]]] = {}  # per handle with an index, by passage

    async def start(self) -> None:
        if self._journal is not None:
            from .store import sweep_orphans

            try:
                await asyncio.to_thread(sweep_orphans, self.home, self._journal)
            except OSError:
                pass

    def tools(self) -> Sequence[Tool]:
        if self.store is None:
            return ()
        return (Tool.from_model(TOOL_NAME, DESCRIPTION, RetrieveInput, self._run, read_only=True, trusted=True),)

    async def keep(self, tool: str, text: str) -> str | None:
        """Keep the whole `text` of a cut result of `tool`; its handle, or None when it was not kept."""
        if tool == TOOL_NAME or self.store is None or (self._offered is not None and not self._offered()):
            return None  # its passages come from a kept output already
        try:
            return await asyncio.to_thread(self.store.keep, tool, text)
        except OSError:
            return None

    async def close(self) -> None:
        for index in self._indexes.values():
            index.close()
        self._indexes.clear()
        self._embeddings.clear()
        if self.store is not None:
            self.store.remove_if_empty()

    async def _index(self, handle: str) -> LexicalIndex:
        index = self._indexes.get(handle)
        if index is not None:
            self._indexes.move_to_end(handle)
            return index

        store = self.store
        assert store is not None

        def build() -> LexicalIndex:
            from .passages import split
            from .rank import LexicalIndex

            return LexicalIndex(split(store.read(handle)))

        index = await asyncio.to_thread(build)
        self._indexes[handle] = index
        while len(self._indexes) > INDEXES_KEPT:
            dropped, old = self._indexes.popitem(last=False)
            old.close()
            self._embeddings.pop(dropped, None)
        return index

    async def _run(self, call: Invocation, ctx: ToolContext) -> ToolOutcome:
        from .rank import IndexError_, QueryError

        a: RetrieveInput = call.input
        handle = a.handle.strip()
        assert self.store is not None
        try:
            self.store.path_of(handle)
            index = await self._index(handle)
            found = await asyncio.to_thread(index.search, a.query, max(a.limit, 50))
        except RetrieveError as exc:
            return ToolOutcome(f"Error: {exc}", True, "invalid_arguments")
        except QueryError as exc:
            return ToolOutcome(f"Error: {exc}", True, "invalid_arguments")
        except IndexError_ as exc:
            return ToolOutcome(f"Error: {exc}", True, "tool_error")
        order = [i for i, _ in found]
        note = ""
        if self.settings.embeddings_url:
            order, note = await self._with_embeddings(handle, index, a.query, order)
        return ToolOutcome(self._render(handle, a.query, index, order[: a.limit], note))

    async def _with_embeddings(self, handle: str, index: LexicalIndex, query: str, lexical: list[int]) -> tuple[list[int], str]:
        """`lexical` fused with the ranking by embeddings; on failure `lexical` with a note saying so."""
        from .rank import EMBED_ALL_MAX, EMBED_CANDIDATES, EMBED_SECONDS, EmbeddingsError, cosine, fuse

        candidates = list(range(len(index.passages))) if len(index.passages) <= EMBED_ALL_MAX else lexical[:EMBED_CANDIDATES]
        try:
            async with asyncio.timeout(EMBED_SECONDS):
                known = self._embeddings.setdefault(handle, {})
                missing = [i for i in candidates if i not in known]
                vectors = await self._embed([query, *(index.passages[i].text for i in missing)])
        except (EmbeddingsError, TimeoutError) as exc:
            why = str(exc) if isinstance(exc, EmbeddingsError) else f"the embeddings took longer than {EMBED_SECONDS:.0f} s"
            return lexical, f"(ranked by BM25 alone: {why})"
        query_vector = vectors[0]
        for i, vector in zip(missing, vectors[1:], strict=True):
            known[i] = array("f", vector)  # 4 bytes a number: an output's 2,000 passages in a few MB
        semantic = sorted(candidates, key=lambda i: -cosine(query_vector, known[i]))
        return fuse(lexical, semantic), "(ranked by BM25 and embeddings)"

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        from .rank import embed

        s = self.settings
        assert s.embeddings_url is not None
        key = s.embeddings_api_key.get_secret_value() if s.embeddings_api_key is not None else None
        if self._http is not None:
            return await embed(self._http, s.embeddings_url, s.embeddings_model, key, texts)
        import httpx

        async with httpx.AsyncClient(trust_env=False, follow_redirects=False) as client:
            return await embed(client, s.embeddings_url, s.embeddings_model, key, texts)

    def _render(self, handle: str, query: str, index: LexicalIndex, order: list[int], note: str) -> str:
        """The passages, best first, within the tool-result limit: each cut to its share of it, and
        fewer passages when a share would be too small to read."""
        if not order:
            return f"No passage of {handle} matches {query!r}. Try other words from the output (a name, an error message)."
        rest = f" of {handle} for {query!r}, best first" + (f" {note}" if note else "") + ":"
        budget = self.max_chars - len(rest) - 220
        fits = max(1, budget // (MIN_SHARE + PASSAGE_OVERHEAD))
        left_out = max(0, len(order) - fits)
        order = order[:fits]
        room = max(1, budget // len(order) - PASSAGE_OVERHEAD)
        parts = [f"{len(order)} passage{'s' if len(order) != 1 else ''}{rest}"]
        for n, i in enumerate(order, 1):
            p = index.passages[i]
            text = p.text if len(p.text) <= room else p.text[:room] + f"\n[... {len(p.text) - room:,} more characters of this passage ...]"
            where = f"line {p.first}" if p.first == p.last else f"lines {p.first}-{p.last}"
            parts.append(f"\n[{n}] {where}\n{text}")
        if left_out:
            parts.append(f"\n({left_out} more passage{'s' if left_out != 1 else ''} left out to keep within the tool-result limit: ask for fewer)")
        return "\n".join(parts)

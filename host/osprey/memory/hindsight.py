"""The `hindsight` memory provider: memories kept in a bank of a Hindsight service over HTTP.

Hindsight extracts facts from what it is given and consolidates them on the server, so this
provider adds (one memory, or an add-only batch in one request) and recalls (a query, the
configured budget, at most 4,096 tokens); replace and remove are refused with a message that says
to store the corrected fact instead. Both targets share one bank: each memory carries its target
in its metadata and tags, and recall reports it from there. The first operation probes the
service's version endpoint; a failed probe is retried by the next operation.

The requests are the ones the `hindsight-client` package sends (`GET /version`,
`POST /v1/default/banks/{bank}/memories`, `POST /v1/default/banks/{bank}/memories/recall`, a
Bearer API key), made with httpx directly rather than through that package: it is a large
generated client built on aiohttp (a second HTTP stack beside the project's httpx, with its own
dependencies and import cost), it retries on its own, and it cannot take the caller's client or
bound what it reads. Here every request has one deadline, every body read is capped, and every
failure becomes a `MemoryStoreError` naming the service.

`snapshot()` makes no request: start-up does not wait on a remote service, and Hindsight recalls
by query rather than listing a bank, so the prompt block is one line saying where memory is kept
and how to read it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ..errors import ConfigError
from .base import BLOCKED, TARGETS, MemoryEntry, MemoryOperation, MemoryStoreError, Target
from .safety import secret, unsafe

if TYPE_CHECKING:
    import httpx
    from pydantic import SecretStr

    from ..config.schema import HindsightSettings

VERSION_PATH = "/version"
RECALL_MAX_TOKENS = 4096
# What one answer may hold; a larger one is refused as invalid rather than read whole.
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
# What recall hands back at most (4,096 tokens is well under this); later results are dropped.
MAX_RECALL_CHARS = 64_000
MAX_RECALL_ENTRIES = 200
# How much of an error answer a message quotes.
ERROR_SNIPPET_CHARS = 200
TARGET_KEY = "osprey_target"
CONTEXTS: dict[Target, str] = {
    "memory": "a note a coding agent kept about the project it works on and its context",
    "user": "a note a coding agent kept about its user",
}
REFUSED_EDIT = (
    "Hindsight consolidates memories on the server, so {action} is not supported by the hindsight "
    "memory provider. Store the corrected fact with add instead; Hindsight weighs it against the "
    "outdated one."
)


class HindsightMemory:
    """A `MemoryStore` kept in a Hindsight bank. `check` (by default `safety.unsafe`) returns a
    reason when text looks like an instruction injection: such content is refused on add, and such
    recalled text is shown as `BLOCKED`. Content holding a credential is refused on add too: it
    would leave the machine."""

    name = "hindsight"

    def __init__(
        self,
        settings: HindsightSettings,
        *,
        api_key: SecretStr | None,
        client: httpx.AsyncClient | None = None,
        check: Callable[[str], str | None] | None = None,
    ) -> None:
        key = api_key.get_secret_value().strip() if api_key is not None else ""
        if settings.mode == "cloud" and not key:
            raise ConfigError(
                "The hindsight memory provider in cloud mode needs a nonempty HINDSIGHT_API_KEY environment variable, "
                "and it is empty or unset. Set it to your Hindsight API key, or set [memory.hindsight] mode = \"local_external\" "
                "for a service you run yourself, or choose another [memory] provider."
            )
        if settings.bank_id in (".", ".."):
            raise ConfigError(f"[memory.hindsight] bank_id {settings.bank_id!r} is not a bank name: use letters, digits, '_', '.', ':' or '-'.")
        self.settings = settings
        self.url = settings.url
        self._bank_path = f"/v1/default/banks/{quote(settings.bank_id, safe='')}/memories"
        self._headers = {"Accept": "application/json"}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        self._client = client
        self._owns_client = client is None
        self._check = check if check is not None else unsafe
        self._probed = False
        self._probe_lock = asyncio.Lock()

    # -- the MemoryStore contract -------------------------------------------------

    async def add(self, content: str, target: Target = "memory") -> str:
        """Store one memory in the bank, tagged with its target."""
        item = self._item(content, target)
        await self._retain([item])
        return f"Stored in Hindsight bank {self.settings.bank_id!r} ({target}); Hindsight merges it with what it already holds."

    async def replace(self, old_text: str, content: str, target: Target = "memory") -> str:
        """Refused: Hindsight consolidates memories itself."""
        raise MemoryStoreError(REFUSED_EDIT.format(action="replace"), write=True)

    async def remove(self, old_text: str, target: Target = "memory") -> str:
        """Refused: Hindsight consolidates memories itself."""
        raise MemoryStoreError(REFUSED_EDIT.format(action="remove"), write=True)

    async def batch(self, operations: Sequence[MemoryOperation], target: Target = "memory") -> str:
        """Store an add-only batch in one request; a batch with replace or remove is refused whole."""
        if not operations:
            raise MemoryStoreError("The batch has no operations: give at least one add.", write=True)
        edits = sorted({op.action for op in operations if op.action != "add"})
        if edits:
            raise MemoryStoreError(
                REFUSED_EDIT.format(action=" and ".join(edits)) + " Nothing in this batch was stored; send the adds alone.",
                write=True,
            )
        items = [self._item(op.content, target, where=f"operation {i + 1}: ") for i, op in enumerate(operations)]
        await self._retain(items)
        return f"Stored {len(items)} memories in Hindsight bank {self.settings.bank_id!r} ({target})."

    async def recall(self, query: str) -> list[MemoryEntry]:
        """The bank's memories most relevant to `query`, in Hindsight's order (relevance, not
        recency; Hindsight matches meaning, not every term), within the recall budget and
        4,096 tokens."""
        if not query.strip():
            raise MemoryStoreError("Hindsight recalls by meaning and needs a query: say what you want to remember.", write=False)
        body = {"query": query, "budget": self.settings.recall_budget, "max_tokens": RECALL_MAX_TOKENS}
        answer = await self._request("POST", f"{self._bank_path}/recall", body, write=False, doing="recall")
        results = answer.get("results")
        if not isinstance(results, list):
            raise self._invalid("recall", "it has no 'results' list", write=False)
        entries: list[MemoryEntry] = []
        used = 0
        for result in results:
            if not isinstance(result, dict) or not isinstance(result.get("text"), str):
                raise self._invalid("recall", "a result has no 'text' string", write=False)
            text: str = result["text"].strip()
            if not text:
                continue
            used += len(text)
            if used > MAX_RECALL_CHARS or len(entries) == MAX_RECALL_ENTRIES:
                break
            target = _target_of(result)
            if self._check(text) is not None:
                entries.append(MemoryEntry(target=target, text=BLOCKED, blocked=True))
            else:
                entries.append(MemoryEntry(target=target, text=text))
        return entries

    async def snapshot(self) -> str:
        """One line: where memory is kept and how to read it (no request is made)."""
        return (
            f"Memory is kept in the Hindsight bank {self.settings.bank_id!r} and is not listed here: "
            "use the memory tool's recall action with a query to read it, and add to store a new or corrected fact."
        )

    async def aclose(self) -> None:
        """Close the HTTP client this provider built (a client passed in stays open)."""
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    # -- requests ------------------------------------------------------------------

    def _item(self, content: str, target: Target, *, where: str = "") -> dict[str, Any]:
        if target not in TARGETS:
            raise MemoryStoreError(f"{where}unknown target {target!r}: use 'memory' or 'user'.", write=True)
        if not content.strip():
            raise MemoryStoreError(f"{where}the content is empty: give the fact to remember.", write=True)
        reason = self._check(content)
        if reason is not None:
            raise MemoryStoreError(f"{where}refused: the content looks like an instruction injection (it {reason}). Nothing was stored.", write=True)
        kind = secret(content)
        if kind is not None:
            raise MemoryStoreError(f"{where}refused: the content seems to hold {kind}, and memory never keeps credentials. Nothing was stored; leave the credential out.", write=True)
        return {
            "content": content,
            "timestamp": datetime.now(UTC).isoformat(),
            "context": CONTEXTS[target],
            "metadata": {TARGET_KEY: target},
            "tags": [f"osprey:{target}"],
        }

    async def _retain(self, items: list[dict[str, Any]]) -> None:
        answer = await self._request("POST", self._bank_path, {"items": items, "async": False}, write=True, doing="store")
        if answer.get("success") is not True:
            raise self._invalid("store", "it did not report success; the memory may not have been stored", write=True)

    async def _probe(self) -> None:
        async with self._probe_lock:
            if self._probed:
                return
            answer = await self._send("GET", VERSION_PATH, None, write=False, doing="version check")
            if not isinstance(answer.get("api_version"), str):
                raise self._invalid("version check", "it has no 'api_version' string; is this a Hindsight service?", write=False)
            self._probed = True

    async def _request(self, method: str, path: str, body: dict[str, Any], *, write: bool, doing: str) -> dict[str, Any]:
        if not self._probed:
            try:
                await self._probe()
            except MemoryStoreError as exc:
                # A write that never reached its endpoint still failed as a write.
                raise MemoryStoreError(str(exc), write=write) from exc
        return await self._send(method, path, body, write=write, doing=doing)

    async def _send(self, method: str, path: str, body: dict[str, Any] | None, *, write: bool, doing: str) -> dict[str, Any]:
        """One request under the configured deadline; the answer must be a JSON object."""
        import httpx

        url = self.url + path
        timeout = self.settings.timeout_secs
        unsure = " The memory may or may not have been stored." if write else ""
        try:
            async with asyncio.timeout(timeout):
                client = self._http()
                async with client.stream(method, url, json=body, headers=self._headers) as response:
                    status = response.status_code
                    data = await _read_bounded(response)
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise MemoryStoreError(
                f"Hindsight at {self.url} did not answer the {doing} within {timeout:g} s.{unsure} "
                "Check that the service is up, or raise [memory.hindsight] timeout_secs.",
                write=write,
            ) from exc
        except _TooLarge as exc:
            raise self._invalid(doing, f"it is larger than {MAX_RESPONSE_BYTES} bytes", write=write) from exc
        except httpx.ConnectError as exc:
            raise MemoryStoreError(
                f"Could not connect to Hindsight at {self.url} for the {doing} ({exc or type(exc).__name__}). "
                "Start the service, or fix [memory.hindsight] mode or api_url.",
                write=write,
            ) from exc
        except (httpx.HTTPError, OSError) as exc:
            raise MemoryStoreError(
                f"The {doing} request to Hindsight at {self.url} failed ({type(exc).__name__}: {exc}).{unsure} Check the service and try again.",
                write=write,
            ) from exc
        if status >= 300:
            raise MemoryStoreError(_status_message(self.url, doing, status, data) + unsure, write=write)
        try:
            answer = json.loads(data)
        except ValueError as exc:  # UnicodeDecodeError is a ValueError
            raise self._invalid(doing, "it is not JSON", write=write) from exc
        if not isinstance(answer, dict):
            raise self._invalid(doing, "it is not a JSON object", write=write)
        return answer

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.settings.timeout_secs), follow_redirects=False)
        return self._client

    def _invalid(self, doing: str, what: str, *, write: bool) -> MemoryStoreError:
        return MemoryStoreError(
            f"Hindsight at {self.url} gave an invalid answer to the {doing}: {what}. "
            "Check that [memory.hindsight] api_url points at a Hindsight service.",
            write=write,
        )


class _TooLarge(Exception):
    pass


async def _read_bounded(response: httpx.Response) -> bytes:
    """The body, refused past MAX_RESPONSE_BYTES (checked on the declared length and while reading)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_RESPONSE_BYTES:
        raise _TooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _status_message(url: str, doing: str, status: int, data: bytes) -> str:
    detail = " ".join(data[: ERROR_SNIPPET_CHARS * 4].decode("utf-8", "replace").split())[:ERROR_SNIPPET_CHARS]
    said = f": {detail}" if detail else ""
    if status in (401, 403):
        advice = "Check HINDSIGHT_API_KEY."
    elif status in (429, 503):
        advice = "The service is busy; try again later."
    elif status >= 500:
        advice = "The service failed; check its logs and try again."
    elif 300 <= status < 400:
        advice = "Set [memory.hindsight] api_url to the service's own address."
    else:
        advice = "Check [memory.hindsight] api_url and bank_id."
    return f"Hindsight at {url} refused the {doing} (HTTP {status}{said}). {advice}"


def _target_of(result: dict[str, Any]) -> Target:
    metadata = result.get("metadata")
    if isinstance(metadata, dict) and metadata.get(TARGET_KEY) == "user":
        return "user"
    tags = result.get("tags")
    if isinstance(tags, list) and "osprey:user" in tags:
        return "user"
    return "memory"

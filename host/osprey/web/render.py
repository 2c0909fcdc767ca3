"""Turning a fetched body into text a model reads: HTML as Markdown-like text, plain text and
JavaScript as they are, JSON pretty-printed, XML as it is, PDF as its extracted text. Decoding
follows the charset of the headers, then a byte-order mark, then the document's own declaration,
then UTF-8, and falls back to windows-1252 (what browsers do for unlabelled Latin text)."""

from __future__ import annotations

import asyncio
import codecs
import io
import json
import os
import re
import sys
import time
from dataclasses import asdict, dataclass, field

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
JSON_TYPES = frozenset({"application/json", "text/json", "application/ld+json", "application/manifest+json"})
XML_TYPES = frozenset({"application/xml", "text/xml", "application/rss+xml", "application/atom+xml"})
JS_TYPES = frozenset({"application/javascript", "application/x-javascript", "application/ecmascript", "text/javascript", "text/ecmascript"})
PDF_TYPES = frozenset({"application/pdf", "application/x-pdf"})
# Types sent for content of unknown kind: the body decides.
SNIFF_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream", "application/unknown"})

# HTML and PDF bodies larger than this are rendered in a child process, killed at the deadline:
# parsing them is pure Python (seconds per MiB), which in a thread would hold the broker's GIL
# and could not be stopped.
INLINE_BYTES = 256 * 1024
# The child's environment: enough to run Python, none of the person's secrets.
_CHILD_ENV_NAMES = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "LC_CTYPE", "SYSTEMROOT", "TMPDIR")

PDF_MAX_PAGES = 200
PDF_MAX_SECONDS = 20.0
PDF_MAX_CHARS = 2_000_000

# WHATWG maps these labels to windows-1252; decoding them as ISO-8859-1 would turn curly quotes
# and dashes (0x80-0x9f) into control characters.
_WINDOWS_1252_ALIASES = frozenset({"latin_1", "iso8859_1", "ascii"})


class RenderError(Exception):
    """The body cannot be shown; `category` is a stable name (unsupported_content, unreadable_pdf, ...)."""

    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category
        self.message = message


@dataclass
class Rendered:
    text: str
    kind: str                # html, text, json, xml, pdf
    encoding: str | None = None
    title: str | None = None
    notes: list[str] = field(default_factory=list)


def _codec(label: str | None) -> str | None:
    """The Python codec of a charset label, or None when the label names no text encoding."""
    if not label:
        return None
    label = label.strip().strip("\"'").lower()
    if not label or len(label) > 40:
        return None
    try:
        info = codecs.lookup(label)
    except LookupError:
        return None
    name = info.name
    if name in _WINDOWS_1252_ALIASES:
        return "cp1252"
    try:
        b"x".decode(name, "replace")  # bytes-to-bytes codecs (base64, zlib, ...) are not text encodings
    except LookupError:
        return None
    if name in ("utf-7", "rot-13"):
        return None
    return name


def _bom(body: bytes) -> str | None:
    if body.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if body.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    return None


def _declared(body: bytes, kind: str) -> str | None:
    if kind not in ("html", "xml"):
        return None
    from bs4.dammit import EncodingDetector

    return EncodingDetector.find_declared_encoding(body[:4096], is_html=kind == "html")


def decode(body: bytes, header_charset: str | None, kind: str) -> tuple[str, str]:
    """The body as text and the encoding used."""
    for candidate in (_bom(body), _codec(header_charset), _codec(_declared(body, kind))):
        if candidate:
            return body.decode(candidate, "replace"), candidate
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as exc:
        if kind == "json" or exc.reason == "unexpected end of data":
            # JSON is UTF-8 by definition; a character cut by the size limit is not a reason to switch.
            return body.decode("utf-8", "replace"), "utf-8"
    return body.decode("cp1252", "replace"), "cp1252"


def classify(mime: str, body: bytes) -> str:
    """html, pdf, json, xml or text, from the content type or (when it says nothing) the body."""
    if mime in HTML_TYPES:
        return "html"
    if mime in PDF_TYPES:
        return "pdf"
    if mime in JSON_TYPES or mime.endswith("+json"):
        return "json"
    if mime in XML_TYPES or mime.endswith("+xml"):
        return "xml"
    if mime.startswith("text/") or mime in JS_TYPES:
        return "text"
    if mime in SNIFF_TYPES:
        head = body[:1024].lstrip().lower()
        if head.startswith(b"%pdf-"):
            return "pdf"
        if head.startswith((b"<!doctype html", b"<html")) or b"<html" in head:
            return "html"
        if head.startswith(b"<?xml"):
            return "xml"
        if b"\x00" not in body[:8192]:
            try:
                body[:8192].decode("utf-8")
            except UnicodeDecodeError as exc:
                if exc.reason != "unexpected end of data":
                    raise RenderError("unsupported_content", "the response has no content type and is not text") from None
            return "json" if head[:1] in (b"{", b"[") else "text"
        raise RenderError("unsupported_content", "the response has no content type and is binary")
    raise RenderError("unsupported_content", f"web_fetch cannot show {mime} content (it reads HTML, text, JavaScript, JSON, XML and PDF)")


_DROPPED = ("script", "style", "noscript", "template", "svg", "math", "iframe", "object", "embed", "canvas", "head")


def _html(text: str) -> tuple[str, str | None]:
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    soup = BeautifulSoup(text, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else None
    # One walk over the tree: drop what is never text, and inline images that would be noise.
    for tag in soup.find_all(_DROPPED + ("img",)):
        if tag.decomposed:
            continue  # inside something already dropped
        if tag.name != "img":
            tag.decompose()
            continue
        src = str(tag.get("src") or "")
        if src.startswith("data:") or len(src) > 2000:
            tag.replace_with(str(tag.get("alt") or ""))
    converter = MarkdownConverter(heading_style="ATX", bullets="-", escape_asterisks=False, escape_underscores=False, escape_misc=False)
    markdown = converter.convert_soup(soup)
    markdown = re.sub(r"[ \t]+\n", "\n", markdown)
    markdown = re.sub(r"\n{3,}", "\n\n", markdown).strip()
    return markdown, title or None


def _json(text: str) -> tuple[str, list[str]]:
    try:
        value = json.loads(text)
        return json.dumps(value, indent=2, ensure_ascii=False), []
    except (json.JSONDecodeError, RecursionError, ValueError):
        return text, ["the body is not valid JSON; shown as received"]


def _pdf(body: bytes) -> tuple[str, list[str]]:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError, PyPdfError

    deadline = time.monotonic() + PDF_MAX_SECONDS
    try:
        reader = PdfReader(io.BytesIO(body), strict=False)
        if reader.is_encrypted and not reader.decrypt(""):
            raise RenderError("unreadable_pdf", "the PDF is encrypted with a password")
        total = len(reader.pages)
        parts: list[str] = []
        size = 0
        notes: list[str] = []
        for number in range(total):
            if number >= PDF_MAX_PAGES:
                notes.append(f"only the first {PDF_MAX_PAGES} of {total} pages were read")
                break
            if time.monotonic() > deadline:
                notes.append(f"text extraction stopped after {PDF_MAX_SECONDS:g} s, at page {number + 1} of {total}")
                break
            page_text = reader.pages[number].extract_text() or ""
            parts.append(f"--- page {number + 1} of {total} ---\n{page_text.strip()}")
            size += len(page_text)
            if size >= PDF_MAX_CHARS:
                notes.append(f"only the first {number + 1} of {total} pages were read ({PDF_MAX_CHARS:,} characters)")
                break
    except RenderError:
        raise
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError, OSError) as exc:
        raise RenderError("unreadable_pdf", f"the PDF could not be read: {type(exc).__name__}: {str(exc)[:200]}") from None
    text = "\n\n".join(parts).strip()
    if not text.replace("-", "").strip():
        notes.append("the PDF holds no extractable text (it may be scanned images)")
    return text, notes


def render(body: bytes, mime: str, header_charset: str | None, *, truncated: bool) -> Rendered:
    """The body as text. Runs in a worker thread: parsing a large page takes a while."""
    kind = classify(mime, body)
    if kind == "pdf":
        if truncated:
            raise RenderError("body_too_large", "the PDF is larger than the 5 MiB body limit; a cut PDF cannot be read")
        text, notes = _pdf(body)
        return Rendered(text, "pdf", notes=notes)
    text, encoding = decode(body, header_charset, kind)
    if kind == "html":
        markdown, title = _html(text)
        return Rendered(markdown, "html", encoding, title)
    if kind == "json":
        pretty, notes = _json(text)
        return Rendered(pretty, "json", encoding, notes=notes)
    return Rendered(text, kind, encoding)


async def render_bounded(body: bytes, mime: str, header_charset: str | None, *, truncated: bool) -> Rendered:
    """`render` off the event loop: small bodies in a worker thread, large HTML and PDF in a child
    process that is killed when the caller's deadline cancels this coroutine."""
    kind = classify(mime, body)
    if kind not in ("html", "pdf") or len(body) <= INLINE_BYTES:
        return await asyncio.to_thread(render, body, mime, header_charset, truncated=truncated)
    header = json.dumps({"mime": mime, "charset": header_charset, "truncated": truncated}).encode() + b"\n"
    env = {name: os.environ[name] for name in _CHILD_ENV_NAMES if name in os.environ}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "osprey.web.render",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )
    try:
        out, err = await proc.communicate(header + body)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    try:
        answer = json.loads(out)
    except ValueError:
        detail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        raise RenderError("render_failed", f"rendering the page failed: {detail[0][:300]}") from None
    if not answer.get("ok"):
        raise RenderError(str(answer.get("category") or "render_failed"), str(answer.get("message") or "rendering the page failed"))
    return Rendered(**answer["rendered"])


def _child_main() -> int:
    """The child process of `render_bounded`: a JSON header line, then the body, on stdin; the
    rendered page (or the error) as JSON on stdout."""
    data = sys.stdin.buffer.read()
    line, _, body = data.partition(b"\n")
    header = json.loads(line)
    try:
        rendered = render(body, header["mime"], header["charset"], truncated=header["truncated"])
        answer: dict[str, object] = {"ok": True, "rendered": asdict(rendered)}
    except RenderError as exc:
        answer = {"ok": False, "category": exc.category, "message": exc.message}
    sys.stdout.buffer.write(json.dumps(answer).encode())
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())

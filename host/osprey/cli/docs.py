"""`osprey docs [TOPIC]`: the documentation pages, from a source checkout or an installation."""

from __future__ import annotations

import re
import site
import sys
from pathlib import Path

import click

# The pages are Osprey's own, but an installation's share dir can hold anything: read boundedly.
MAX_PAGE_BYTES = 1024 * 1024
HEADING_SCAN_BYTES = 4096
_TOPIC = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def docs_dirs() -> list[Path]:
    """Where the pages may be, in order: the checkout this code runs from, then the share dirs
    that `pip install` fills (`sys.prefix`, and the user base for `--user` installs)."""
    checkout = Path(__file__).resolve().parents[3]
    dirs = [checkout / "docs"] if (checkout / "pyproject.toml").is_file() else []
    dirs.append(Path(sys.prefix) / "share" / "osprey" / "docs")
    dirs.append(Path(site.getuserbase()) / "share" / "osprey" / "docs")
    return dirs


def find_docs() -> Path | None:
    """The first place that holds pages, or None."""
    for directory in docs_dirs():
        if directory.is_dir() and any(directory.glob("*.md")):
            return directory
    return None


def title(page: Path) -> str:
    """A page's first `# ` heading, or "" when it has none near the top."""
    try:
        with page.open("rb") as f:
            head = f.read(HEADING_SCAN_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""
    for line in head.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return ""


def topics(directory: Path) -> dict[str, Path]:
    """Topic name (the file's stem) -> page, sorted by name."""
    pages = {p.stem: p for p in directory.glob("*.md") if _TOPIC.fullmatch(p.stem) and p.is_file()}
    return dict(sorted(pages.items()))


def topic_list(pages: dict[str, Path]) -> str:
    width = max((len(name) for name in pages), default=0)
    return "\n".join(f"  {name.ljust(width)}  {title(page)}".rstrip() for name, page in pages.items())


def read_page(page: Path) -> str:
    with page.open("rb") as f:
        data = f.read(MAX_PAGE_BYTES + 1)
    text = data[:MAX_PAGE_BYTES].decode("utf-8", "replace")
    if len(data) > MAX_PAGE_BYTES:
        text += f"\n[cut at {MAX_PAGE_BYTES} bytes; the whole page is {page}]\n"
    return text


@click.command()
@click.argument("topic", required=False)
def docs(topic: str | None) -> None:
    """Show the documentation: without TOPIC, the topics; with one, its page.

    \b
    osprey docs                  the topics and their titles
    osprey docs configuration    settings, their precedence and the tool-result limits
    osprey docs events           the JSON Lines event schema and the exit statuses
    """
    directory = find_docs()
    if directory is None:
        looked = ", ".join(str(d) for d in docs_dirs())
        click.echo(f"osprey docs: no documentation pages found (looked in {looked}). "
                   "Reinstall Osprey from its wheel or read docs/ in its source.", err=True)
        sys.exit(1)
    pages = topics(directory)
    if topic is None:
        click.echo(f"Topics ({directory}):\n{topic_list(pages)}\n\nRun `osprey docs TOPIC` to read one.")
        return
    name = topic.strip().lower().removesuffix(".md")
    page = pages.get(name)
    if page is None:
        click.echo(f"osprey docs: no topic {topic[:80]!r}. Topics:\n{topic_list(pages)}", err=True)
        sys.exit(1)
    try:
        text = read_page(page)
    except OSError as exc:
        click.echo(f"osprey docs: {page} cannot be read: {exc.strerror or exc}", err=True)
        sys.exit(1)
    if sys.stdout.isatty():
        click.echo_via_pager(text.removesuffix("\n"))  # the pager ends the text with a newline itself
    else:
        click.echo(text, nl=not text.endswith("\n"))

"""`osprey sessions search`: full-text search over every saved session (`osprey.sessions.search`)."""

from __future__ import annotations

import json
import sys

import click

from .sessions import sessions


@sessions.command("search")
@click.argument("words", nargs=-1, required=True, metavar="QUERY")
@click.option("--workspace", type=click.Path(file_okay=False), help="Only sessions run in this directory or below it (default: every directory).")
@click.option("--limit", type=click.IntRange(1, 200), default=20, show_default=True, help="At most this many hits.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object: the hits, and how many older events are not indexed yet.")
@click.option("--raw", is_flag=True, help="Read QUERY as FTS5 query syntax (AND, OR, NOT, NEAR, \"phrases\", prefix*) instead of plain words.")
def search_command(words: tuple[str, ...], workspace: str | None, limit: int, as_json: bool, raw: bool) -> None:
    """Find the saved sessions whose prompts, answers, tool calls or tool results hold QUERY.

    \b
    Every word must appear (case and accents do not matter); the best hits
    come first, the newest first among equally good ones. Sessions of every
    working directory are searched, child sessions included, unless
    --workspace limits them.
    """
    from ..sessions.search import KIND_LABELS, SearchError, marked, search
    from .sessions import _path, _short_dir, _when

    path = _path()
    query = " ".join(words)
    try:
        results = search(path, query, workspace=workspace, limit=limit, raw=raw)
    except SearchError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        payload = {"hits": [{**hit.model_dump(), "snippet": marked(hit.snippet)} for hit in results.hits], "unindexed": results.unindexed}
        click.echo(json.dumps(payload, ensure_ascii=False, indent=2))
        return
    if results.unindexed:
        click.echo(f"osprey: {results.unindexed:,} saved events are not in the search index yet (so not searched); "
                   "searching again goes on indexing them", err=True)
    if not results.hits:
        scope = f"in sessions run in {workspace} or below" if workspace is not None else f"in the sessions saved in {path}"
        click.echo(f"no hits for {query!r} {scope}")
        return
    bold = sys.stdout.isatty()
    for hit in results.hits:
        child = f" (child of {hit.parent_id})" if hit.parent_id else ""
        click.echo(f"{hit.session_id}{child}  {_when(hit.ts)}  {_short_dir(hit.cwd)}  {KIND_LABELS[hit.kind]}"
                   + (f"  {hit.title}" if hit.title else ""))
        snippet = marked(hit.snippet, "\x1b[1m", "\x1b[0m") if bold else marked(hit.snippet)
        click.echo(f"    {snippet}")
    click.echo(f"\n{len(results.hits)} hit{'s' if len(results.hits) != 1 else ''}; osprey sessions show ID prints a whole session", err=True)

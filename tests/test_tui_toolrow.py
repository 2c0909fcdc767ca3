"""A bash row's live output: redrawn at most every LIVE_REFRESH, bounded to a tail, replaced by the result at once."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.app import App, ComposeResult
from textual.containers import VerticalScroll
from textual.pilot import Pilot

from osprey.events import ToolCallEvent, ToolResultEvent
from osprey.tui.widgets import LIVE_LINES, LIVE_REFRESH, MAX_LIVE_OUTPUT, ToolRow, last_lines

CALL = ToolCallEvent(turn=1, id="c1", name="bash", arguments={"command": "make -j8"})


class RowApp(App[None]):
    def compose(self) -> ComposeResult:
        yield VerticalScroll(id="conversation")

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).anchor()


def shown(row: ToolRow) -> str:
    return str(row.output.render())


async def until(pilot: Pilot[None], check: Callable[[], bool], limit: float = 5.0) -> float:
    """Seconds until `check` holds (pausing the pilot meanwhile); fails after `limit`."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < limit, "timed out"
        await pilot.pause(0.005)
    return time.monotonic() - start


def test_last_lines() -> None:
    assert last_lines("a\nb\nc", 2) == "…\nb\nc"
    assert last_lines("a\nb\nc\n", 2) == "…\nb\nc\n"
    assert last_lines("a\nb\nc", 3) == "a\nb\nc"
    assert last_lines("one long line", 1) == "one long line"


async def test_live_output_is_coalesced_and_shown_within_the_refresh_interval() -> None:
    app = RowApp()
    async with app.run_test() as pilot:
        row = ToolRow(CALL)
        await app.query_one(VerticalScroll).mount(row)
        row.add_output(b"first\n")
        assert shown(row) == "first\n"  # nothing drawn lately: at once
        row.add_output(b"second\n")
        row.add_output(b"third\n")
        assert "second" not in shown(row)  # drawn a moment ago: it waits for the interval
        waited = await until(pilot, lambda: shown(row) == "first\nsecond\nthird\n")
        assert waited < LIVE_REFRESH + 0.5  # slack for a loaded test machine


async def test_finish_shows_the_result_at_once_and_no_late_redraw_replaces_it() -> None:
    app = RowApp()
    async with app.run_test() as pilot:
        row = ToolRow(CALL)
        await app.query_one(VerticalScroll).mount(row)
        row.add_output(b"building\n")
        row.add_output(b"still building\n")  # a redraw is now pending
        row.finish(ToolResultEvent(turn=1, id="c1", name="bash", ok=True, output="built 3 targets\n"))
        assert shown(row) == "built 3 targets\n" and str(row.title).startswith("✓ bash")
        await pilot.pause(LIVE_REFRESH * 3)
        assert shown(row) == "built 3 targets\n"


async def test_a_10_mb_stream_keeps_a_bounded_tail() -> None:
    app = RowApp()
    async with app.run_test() as pilot:
        row = ToolRow(CALL)
        await app.query_one(VerticalScroll).mount(row)
        lines = [f"line-{n:07d} é".encode() for n in range(800_000)]  # 14 bytes each: 11.2 MB
        data = b"\n".join(lines) + b"\n"
        for start in range(0, len(data), 65_536):  # chunks split lines and the two-byte é
            row.add_output(data[start:start + 65_536])
            assert len(row._live) <= MAX_LIVE_OUTPUT
        await until(pilot, lambda: "line-0799999 é" in shown(row))
        text = shown(row)
        assert text.startswith("…\n") and text.count("\n") == LIVE_LINES + 1
        assert "\ufffd" not in text and f"line-{800_000 - LIVE_LINES:07d} é\n" in text


async def test_many_chunks_end_with_the_last_line_on_screen() -> None:
    app = RowApp()
    async with app.run_test(size=(80, 24)) as pilot:
        row = ToolRow(CALL)
        await app.query_one(VerticalScroll).mount(row)
        for n in range(3000):
            row.add_output(f"step-{n:05d} done\n".encode())
            if n % 50 == 0:
                await pilot.pause(0.002)  # the app runs in between, as when chunks arrive over time
        await until(pilot, lambda: "step-02999" in shown(row))
        await pilot.pause(0.05)
        screen = app.export_screenshot()
        assert "step-02999" in screen and "step-00000" not in screen
        assert row.output.region.bottom <= app.size.height  # drawn in the visible part

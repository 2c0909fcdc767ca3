"""The saved approval rules of one workspace, as a front end lists, adds and revokes them: the
rules that apply there with their scope, and changes that raise the project's errors (an invalid
rule, a file that cannot be read, locked or written) instead of passing them by."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OspreyError
from .rules import RuleError
from .store import ApprovalStore, ApprovalStoreError, SavedRule


class SavedRuleError(OspreyError):
    """A saved rule cannot be added or revoked (an invalid rule, an unknown id, an unreadable file)."""


@dataclass(frozen=True)
class ShownRule:
    """A saved rule as listed for a workspace."""

    id: str
    rule: str
    scope: str  # "this project" or "everywhere"


def scope_of(rule: SavedRule, workspace: str) -> str:
    """"everywhere" for a global rule; "this project" for one saved for `workspace`; else its project."""
    if rule.project is None:
        return "everywhere"
    return "this project" if rule.applies_to(workspace) else rule.project


def applying(store: ApprovalStore, workspace: str) -> list[ShownRule]:
    """The saved rules that apply in `workspace`, in the file's order; raises SavedRuleError when
    the file cannot be read (its rules are then ignored)."""
    problem = store.problem()
    if problem:
        raise SavedRuleError(f"{problem}; its rules are ignored until it is fixed or removed (adding a rule moves it aside)")
    return [ShownRule(r.id, r.rule, scope_of(r, workspace)) for r in store.load() if r.applies_to(workspace)]


def add(store: ApprovalStore, rule: str, *, workspace: str, everywhere: bool) -> tuple[SavedRule, bool]:
    """Save `rule` for `workspace` (or, with `everywhere`, for every workspace); returns the saved
    rule and whether it is new (False: the same rule was saved already with this scope)."""
    text = rule.strip()
    if not text:
        raise SavedRuleError("give a rule, such as read_file or bash(git diff *)")
    before = {r.id for r in store.load()} if store.problem() is None else set()
    try:
        saved = store.add(text, project=None if everywhere else workspace)
    except (RuleError, ValueError, ApprovalStoreError) as exc:
        raise SavedRuleError(str(exc)) from None
    return saved, saved.id not in before


def revoke(store: ApprovalStore, rule_id: str) -> SavedRule:
    """Remove the saved rule `rule_id`; raises SavedRuleError when the file cannot be read or
    changed, or no rule has that id."""
    problem = store.problem()
    if problem:
        raise SavedRuleError(f"{problem}. Nothing was revoked: fix or remove the file")
    try:
        gone = store.revoke(rule_id)
    except ApprovalStoreError as exc:
        raise SavedRuleError(str(exc)) from None
    if gone is None:
        raise SavedRuleError(f"no saved rule has the id {rule_id!r} any more; it may have been revoked elsewhere")
    return gone

"""A question an interceptor asks whatever the policy (a hook's "ask", the guard on the user's own
hooks file) shows why it asks, offers no "allow always" (no saved rule answers it), and a headless
run's denial does not suggest --allow or --yolo, which cannot answer it either."""

from __future__ import annotations

from textual.app import App
from textual.widgets import Button, Static

from osprey.policy.approvals import POLICY_SOURCE, ApprovalRequest, HeadlessApprover
from osprey.tui.approval_screen import ApprovalScreen

ASKED = "the agent asks to REPLACE YOUR OWN hooks file /home/me/.osprey/hooks.toml"


def _request(asked_by: str) -> ApprovalRequest:
    return ApprovalRequest(call_id="c1", tool="extension_manage", arguments={"operation": "replace", "kind": "hooks"},
                           policy="never", reason=ASKED if asked_by != POLICY_SOURCE else "needs approval",
                           suggested_rule="extension_manage", asked_by=asked_by)


async def _shown(request: ApprovalRequest) -> tuple[set[str | None], bool, list[str]]:
    """The screen's buttons, whether `a` opened the scope step, and the reason it shows."""
    app: App[None] = App()
    async with app.run_test() as pilot:
        screen = ApprovalScreen(request)
        await app.push_screen(screen)
        await pilot.pause()
        await pilot.press("a")  # does nothing without "allow always"
        await pilot.pause()
        buttons = {w.id for w in screen.query(Button)}
        scope_open = not screen.query_one("#scope").has_class("hidden")
        reasons = [str(w.render()) for w in screen.query(Static) if w.id == "asked_by"]
    return buttons, scope_open, reasons


async def test_an_interceptors_question_says_why_and_offers_no_allow_always() -> None:
    buttons, scope_open, reasons = await _shown(_request("user-hooks"))
    assert "allow_always" not in buttons and not scope_open
    assert reasons and "YOUR OWN hooks file" in reasons[0]


async def test_the_policys_question_still_offers_allow_always() -> None:
    buttons, scope_open, reasons = await _shown(_request(POLICY_SOURCE))
    assert "allow_always" in buttons and scope_open and not reasons


async def test_a_headless_denial_of_an_interceptors_question_does_not_point_at_allow_or_yolo() -> None:
    own = await HeadlessApprover().ask(_request("user-hooks"))
    policy = await HeadlessApprover().ask(_request(POLICY_SOURCE))
    assert own.decision == policy.decision == "deny"
    assert "YOUR OWN hooks file" in own.reason and "--allow" not in own.reason and "--yolo" not in own.reason
    assert "--allow" in policy.reason

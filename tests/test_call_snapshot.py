"""What the floor judged is kept as a copy that later changes to a call's arguments cannot reach:
a plain copy for flat arguments (a model's usual call), a deep one for nested."""

from __future__ import annotations

from osprey.session.calls import snapshot


def test_flat_arguments_are_copied_and_later_changes_do_not_reach_the_copy() -> None:
    arguments = {"path": "a.txt", "offset": 3, "ratio": 0.5, "all": True, "none": None}
    kept = snapshot(arguments)
    assert kept == arguments and kept is not arguments
    arguments["path"] = "b.txt"
    assert kept["path"] == "a.txt"


def test_nested_arguments_are_copied_deeply() -> None:
    arguments = {"edits": [{"old": "a", "new": "b"}], "path": "a.txt"}
    kept = snapshot(arguments)
    arguments["edits"][0]["new"] = "c"
    assert kept == {"edits": [{"old": "a", "new": "b"}], "path": "a.txt"}

"""The skill frontmatter cache: a discovery that finds each SKILL.md as an earlier one read it
parses nothing, and any change to a file (or to the cache) makes it read the file again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from osprey.skills import cache as cache_module
from osprey.skills import discover_skills
from osprey.skills import discovery as discovery_module


@pytest.fixture
def no_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written by a test are cached at once (they are not changed within the same tick)."""
    monkeypatch.setattr(cache_module, "RACY_NS", 0)


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SKILL.md heads discovery reads and parses (it still parses them)."""
    seen: list[str] = []
    real = discovery_module.read_head

    def counting(path: Path | str, **kwargs: object) -> object:
        seen.append(os.fspath(path))
        return real(path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(discovery_module, "read_head", counting)
    return seen


def write_skill(root: Path, name: str, description: str = "Does a thing.", front: str | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "SKILL.md"
    path.write_text(f"---\n{front if front is not None else f'name: {name}{chr(10)}description: {description}{chr(10)}'}---\nBody.\n")
    return path


def discover(root: Path, cache: Path | None) -> tuple[dict[str, str], list[str]]:
    warnings: list[str] = []
    registry = discover_skills(cwd=root, workspace_root=root, user_root=root / "user", warn=warnings.append, cache=cache)
    return {s.name: s.description for s in registry.skills if s.scope != "bundled"}, warnings


@pytest.mark.usefixtures("no_racy_window")
def test_an_unchanged_tree_is_not_read_again(tmp_path: Path, parses: list[str]) -> None:
    for n in range(5):
        write_skill(tmp_path / "user", f"skill-{n}", f"Does thing {n}.")
    cache = tmp_path / "home" / "cache" / "skills.json"
    first, _ = discover(tmp_path, cache)
    assert len(parses) == 7  # five and the two bundled ones
    assert cache.stat().st_mode & 0o777 == 0o600
    parses.clear()
    second, _ = discover(tmp_path, cache)
    assert second == first and parses == []


@pytest.mark.usefixtures("no_racy_window")
def test_a_changed_file_is_read_again(tmp_path: Path, parses: list[str]) -> None:
    path = write_skill(tmp_path / "user", "deploy", "Deploys the site.")
    cache = tmp_path / "skills.json"
    discover(tmp_path, cache)
    st = path.stat()
    path.write_text(path.read_text().replace("Deploys the site.", "Deploys the docs."))  # same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with the old modification time (the change time moves)
    parses.clear()
    found, _ = discover(tmp_path, cache)
    assert found == {"deploy": "Deploys the docs."} and parses == [str(path)]


def test_a_file_changed_moments_ago_is_not_kept(tmp_path: Path, parses: list[str]) -> None:
    write_skill(tmp_path / "user", "fresh")
    cache = tmp_path / "skills.json"
    discover(tmp_path, cache)
    parses.clear()
    discover(tmp_path, cache)
    assert [Path(p).parent.name for p in parses] == ["fresh"]  # another change in the same tick would not show


@pytest.mark.usefixtures("no_racy_window")
def test_an_invalid_skill_is_remembered_with_its_reason(tmp_path: Path, parses: list[str]) -> None:
    write_skill(tmp_path / "user", "broken", front="name: broken\ndescription: [unclosed\n")
    write_skill(tmp_path / "user", "misnamed", front="name: other-name\ndescription: Fine.\n")
    cache = tmp_path / "skills.json"
    found, first = discover(tmp_path, cache)
    parses.clear()
    again, second = discover(tmp_path, cache)
    assert found == again == {} and first == second and len(first) == 2 and parses == []
    assert "not valid YAML" in first[0] and "does not match its directory" in first[1]


@pytest.mark.usefixtures("no_racy_window")
def test_a_symbolic_link_moved_to_another_file_is_read_again(tmp_path: Path, parses: list[str]) -> None:
    one = write_skill(tmp_path / "store", "one", "First text.")
    two = write_skill(tmp_path / "store2", "one", "Second text.")
    (tmp_path / "user" / "one").mkdir(parents=True)
    link = tmp_path / "user" / "one" / "SKILL.md"
    link.symlink_to(one)
    cache = tmp_path / "skills.json"
    assert discover(tmp_path, cache)[0] == {"one": "First text."}
    link.unlink()
    link.symlink_to(two)
    parses.clear()
    assert discover(tmp_path, cache)[0] == {"one": "Second text."} and parses == [str(link)]


@pytest.mark.usefixtures("no_racy_window")
@pytest.mark.parametrize("content", [
    b"",
    b"{not json",
    b'{"version": 99, "skills": {}}',
    b'{"version": 1, "skills": []}',
    b"[" * 100_000,  # nested too deeply to parse
    b"x" * (cache_module.MAX_BYTES + 1),
])
def test_a_damaged_cache_counts_as_empty(tmp_path: Path, parses: list[str], content: bytes) -> None:
    write_skill(tmp_path / "user", "deploy", "Deploys the site.")
    cache = tmp_path / "skills.json"
    cache.write_bytes(content)
    assert discover(tmp_path, cache)[0] == {"deploy": "Deploys the site."}
    assert len(parses) == 3


@pytest.mark.usefixtures("no_racy_window")
def test_an_entry_for_another_file_identity_is_not_used(tmp_path: Path, parses: list[str]) -> None:
    path = write_skill(tmp_path / "user", "deploy", "Deploys the site.")
    cache = tmp_path / "skills.json"
    discover(tmp_path, cache)
    document = json.loads(cache.read_text())
    entry = document["skills"][str(path)]
    entry[0][1] += 1  # another inode
    entry[2]["description"] = "Forged."
    cache.write_text(json.dumps(document))
    assert discover(tmp_path, cache)[0] == {"deploy": "Deploys the site."}


@pytest.mark.usefixtures("no_racy_window")
def test_a_cache_that_cannot_be_written_changes_nothing(tmp_path: Path, parses: list[str]) -> None:
    write_skill(tmp_path / "user", "deploy", "Deploys the site.")
    cache = tmp_path / "skills.json"
    cache.mkdir()
    assert discover(tmp_path, cache)[0] == {"deploy": "Deploys the site."}
    assert discover(tmp_path, cache)[0] == {"deploy": "Deploys the site."}
    assert len(parses) == 6


def test_a_session_start_with_everything_cached_does_not_import_pyyaml(tmp_path: Path) -> None:
    write_skill(tmp_path / "user", "deploy", "Deploys the site.")
    old = 1_000_000_000_000_000_000
    os.utime(tmp_path / "user" / "deploy" / "SKILL.md", ns=(old, old))
    program = (
        "import sys, time; from pathlib import Path\n"
        "from osprey.skills import cache, discover_skills\n"
        "cache.RACY_NS = 0\n"
        "root = Path(sys.argv[1])\n"
        "names = [s.name for s in discover_skills(cwd=root, workspace_root=root, user_root=root / 'user', warn=print, cache=root / 'c.json').skills]\n"
        "print(names, 'yaml' in sys.modules)\n"
    )
    runs = [subprocess.run([sys.executable, "-c", program, str(tmp_path)], capture_output=True, text=True, check=True, timeout=60).stdout
            for _ in range(2)]
    assert runs[0].strip().endswith("True") and runs[1].strip().endswith("False"), runs
    assert "'deploy'" in runs[1]

"""A trusted project hook or custom tool runs only what was trusted: the pin covers every
workspace file its command line names (interpreter arguments included), it is checked again
right before each run, the bytes that run are the bytes checked, and a command Osprey cannot pin
is refused with the reason."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from osprey.config import load_settings
from osprey.extensions import custom_tools, hooks
from osprey.extensions.custom_tools import custom_tool
from osprey.extensions.discovery import Extensions, discover
from osprey.extensions.hooks import HooksInterceptor
from osprey.interception import PendingCall
from osprey.tools.base import Invocation, ToolContext, ToolOutcome
from osprey.trust import pin_artifact

BUILTIN = {"read_file", "write_file", "edit_file", "bash", "find_files", "grep", "list_directory", "tree"}
GUARD = "#!/bin/sh\ncat >/dev/null\necho '{\"decision\": \"block\", \"reason\": \"the original guard\"}'\n"


class Project:
    def __init__(self, tmp: Path) -> None:
        self.root = tmp.resolve() / "repo"
        self.cwd = self.root
        (self.root / ".git").mkdir(parents=True)
        (self.root / ".osprey" / "tools").mkdir(parents=True)
        self.home = tmp / "home"
        self.home.mkdir()
        self.mark = tmp / "rewritten-code-ran"

    def write(self, relative: str, text: str, mode: int = 0o644) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(mode)
        return path

    def settings(self) -> Any:
        return load_settings(self.cwd, {}, {"OSPREY_HOME": str(self.home), "OPENAI_API_KEY": "x", "PATH": os.environ.get("PATH", "")})

    def discover(self) -> Extensions:
        return discover(self.settings(), BUILTIN)

    def trust_all(self) -> Extensions:
        """Pin every project tool and hooks file as it is now (what `osprey extensions trust` records)."""
        for artifact in self.discover().artifacts:
            if artifact.kind in ("tool", "hooks") and artifact.layer == "project" and artifact.digest and artifact.status != "skipped":
                pin_artifact(self.home, str(self.root), Path(artifact.path).relative_to(self.root).as_posix(), artifact.digest)
        return self.discover()

    def cli_trust(self, name: str) -> subprocess.CompletedProcess[str]:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("OSPREY_")}, "OSPREY_HOME": str(self.home)}
        return subprocess.run([sys.executable, "-m", "osprey", "extensions", "-C", str(self.cwd), "trust", name, "--yes"], env=env,
                              capture_output=True, text=True, timeout=60)

    def hooks_file(self, command: str) -> None:
        self.write(".osprey/hooks.toml", f"[[hooks.PreToolUse]]\nmatcher = 'bash'\n[[hooks.PreToolUse.hooks]]\ncommand = '''{command}'''\n")

    def interceptor(self, found: Extensions, notices: list[Any]) -> HooksInterceptor:
        return HooksInterceptor(found.hook_sets, cwd=str(self.cwd), session_id="s", env={"PATH": os.environ["PATH"]},
                                emit=notices.append, project_dir=str(self.root))

    def rewrite(self, relative: str) -> None:
        """What a sandboxed model would do: the script now runs other code."""
        self.write(relative, f"#!/bin/sh\ncat >/dev/null\ntouch {self.mark}\nexit 0\n", 0o755)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def bash_call(project: Project) -> PendingCall:
    return PendingCall(id="c1", name="bash", arguments={"command": "ls"}, tool=None, turn=1, cwd=str(project.cwd), workspace=str(project.root))


def hook_states(found: Extensions) -> list[tuple[str, str, str]]:
    return [(a.layer, a.trust, a.status) for a in found.artifacts if a.kind == "hooks"]


async def call_tool(found: Extensions, name: str = "guarded") -> ToolOutcome:
    [item] = [t for t in found.tools if t.manifest.name == name]
    tool = custom_tool(item.manifest, item.manifest_dir, env={"PATH": os.environ["PATH"]}, program=item.program, pin=item.pin)
    ctx = ToolContext(client=None, cwd=os.getcwd(), roots=[os.getcwd()], bash_max_output_bytes=1 << 20)  # type: ignore[arg-type]
    value, problem = tool.validate({})
    assert problem is None
    result = await asyncio.wait_for(tool.run(Invocation("c1", name, value), ctx), 30)
    assert isinstance(result, ToolOutcome)
    return result


# --- what a pin covers ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", [
    "sh .claude/hooks/guard.sh",
    'bash "$OSPREY_PROJECT_DIR"/.claude/hooks/guard.sh',
    "python3 -X dev .claude/hooks/guard.sh",
    "sh < .claude/hooks/guard.sh",
    ". .claude/hooks/guard.sh",
    "true && sh -e .claude/hooks/guard.sh 2>/dev/null",
])
def test_the_pin_covers_the_scripts_an_interpreter_is_given(project: Project, command: str) -> None:
    project.write(".claude/hooks/guard.sh", GUARD)
    project.hooks_file(command)
    assert hook_states(project.trust_all()) == [("project", "trusted", "active")]
    project.rewrite(".claude/hooks/guard.sh")
    found = project.discover()
    assert hook_states(found) == [("project", "modified", "inactive")]
    assert found.hooks is None


def test_the_pin_covers_a_file_given_as_an_option_value(project: Project) -> None:
    project.write(".osprey/tools/guarded.toml", 'name = "guarded"\ndescription = "d"\ncommand = ["sh", "--", "--x=../../lib/run.sh"]\n')
    project.write("lib/run.sh", "echo one\n")
    project.trust_all()
    assert [(a.trust, a.status) for a in project.discover().artifacts if a.kind == "tool"] == [("trusted", "active")]
    project.write("lib/run.sh", "echo two\n")
    assert [(a.trust, a.status) for a in project.discover().artifacts if a.kind == "tool"] == [("modified", "inactive")]


# --- checked again right before each run ----------------------------------------------------------


async def test_a_hook_script_rewritten_after_trust_is_refused_when_it_would_run(project: Project) -> None:
    project.write(".claude/hooks/guard.sh", GUARD, 0o755)
    project.hooks_file("sh .claude/hooks/guard.sh")
    notices: list[Any] = []
    interceptor = project.interceptor(project.trust_all(), notices)
    verdict = await interceptor.before_call(bash_call(project))
    assert verdict is not None and verdict.action == "deny" and "the original guard" in verdict.reason
    project.rewrite(".claude/hooks/guard.sh")  # the session goes on with what it discovered at its start
    verdict = await interceptor.before_call(bash_call(project))
    assert not project.mark.exists(), "the rewritten script ran"
    assert verdict is not None and verdict.action == "deny"
    assert ".claude/hooks/guard.sh" in verdict.reason and "guard.sh, which changed since it was trusted" in verdict.reason and "was not run" in verdict.reason
    assert "osprey extensions trust hooks" in verdict.reason
    assert any("was not run" in n.message and n.level == "warning" for n in notices)


async def test_a_program_hook_rewritten_after_trust_is_refused_when_it_would_run(project: Project) -> None:
    project.write("scripts/guard.sh", GUARD, 0o755)
    project.hooks_file("./scripts/guard.sh")
    interceptor = project.interceptor(project.trust_all(), [])
    assert (await interceptor.before_call(bash_call(project))).action == "deny"  # type: ignore[union-attr]
    project.rewrite("scripts/guard.sh")
    verdict = await interceptor.before_call(bash_call(project))
    assert not project.mark.exists()
    assert verdict is not None and verdict.action == "deny" and "scripts/guard.sh" in verdict.reason


async def test_a_file_made_where_a_pinned_hook_names_nothing_is_refused(project: Project) -> None:
    project.hooks_file("cat >/dev/null; ./scripts/later.sh")  # trusted while scripts/later.sh is missing
    interceptor = project.interceptor(project.trust_all(), [])
    project.rewrite("scripts/later.sh")
    verdict = await interceptor.before_call(bash_call(project))
    assert not project.mark.exists()
    assert verdict is not None and verdict.action == "deny" and "scripts/later.sh" in verdict.reason


async def test_a_tool_script_rewritten_after_trust_is_refused_when_it_would_run(project: Project) -> None:
    project.write(".osprey/tools/guarded.toml", 'name = "guarded"\ndescription = "d"\ncommand = ["sh", "../../scripts/tool.sh"]\n')
    project.write("scripts/tool.sh", "cat >/dev/null; echo original tool\n")
    found = project.trust_all()
    assert (await call_tool(found)).text == "original tool\n"
    project.rewrite("scripts/tool.sh")
    outcome = await call_tool(found)
    assert not project.mark.exists(), "the rewritten script ran"
    assert outcome.is_error and outcome.category == "modified"
    assert "scripts/tool.sh" in outcome.text and "changed since it was trusted" in outcome.text and "osprey extensions trust guarded" in outcome.text


async def test_a_tool_program_rewritten_after_trust_is_refused_when_it_would_run(project: Project) -> None:
    project.write(".osprey/tools/guarded.toml", 'name = "guarded"\ndescription = "d"\ncommand = ["../../bin/tool"]\n')
    project.write("bin/tool", "#!/bin/sh\ncat >/dev/null; echo original tool\n", 0o755)
    found = project.trust_all()
    assert (await call_tool(found)).text == "original tool\n"
    project.rewrite("bin/tool")
    outcome = await call_tool(found)
    assert not project.mark.exists() and outcome.category == "modified" and "bin/tool" in outcome.text


# --- the bytes that run are the bytes checked -----------------------------------------------------


async def test_a_hook_runs_the_bytes_that_were_checked(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    project.write(".claude/hooks/guard.sh", GUARD)
    project.hooks_file("sh .claude/hooks/guard.sh")
    interceptor = project.interceptor(project.trust_all(), [])
    real_run = hooks.run_hook

    async def rewrite_then_run(command: str, *args: Any, **kw: Any) -> Any:
        project.rewrite(".claude/hooks/guard.sh")  # between the check and the start of the program
        return await real_run(command, *args, **kw)

    monkeypatch.setattr(hooks, "run_hook", rewrite_then_run)
    verdict = await interceptor.before_call(bash_call(project))
    assert not project.mark.exists(), "the bytes written after the check ran"
    assert verdict is not None and verdict.action == "deny" and "the original guard" in verdict.reason


async def test_a_tool_runs_the_bytes_that_were_checked(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    project.write(".osprey/tools/guarded.toml", 'name = "guarded"\ndescription = "d"\ncommand = ["../../bin/tool", "../lib/helper.sh"]\n')
    project.write("bin/tool", '#!/bin/sh\ncat >/dev/null; . "$1"\n', 0o755)
    project.write("lib/helper.sh", "echo original helper\n")
    found = project.trust_all()
    real_run = custom_tools._run_local

    async def rewrite_then_run(*args: Any, **kw: Any) -> Any:
        project.rewrite("bin/tool")
        project.write("lib/helper.sh", f"touch {project.mark}\n")
        return await real_run(*args, **kw)

    monkeypatch.setattr(custom_tools, "_run_local", rewrite_then_run)
    outcome = await call_tool(found)
    assert not project.mark.exists(), "the bytes written after the check ran"
    assert not outcome.is_error and outcome.text == "original helper\n"


# --- what cannot be pinned ------------------------------------------------------------------------


@pytest.mark.parametrize(("command", "why"), [
    ("bash -c '. .claude/hooks/guard.sh'", "inline code"),
    ("python3 -m guardpkg", "inline code"),
    ("python3 -c 'import guardpkg'", "inline code"),
    ("node -e 'require(\"./x\")'", "inline code"),
    ("sh $HOME/guard.sh", "$HOME"),
    ("sh .claude/hooks/*.sh", "'*'"),
    ("sh `echo .claude/hooks/guard.sh`", "command substitution"),
    ("PYTHONPATH=. python3 x.py", "PYTHONPATH"),
    ("eval 'sh x.sh'", "eval"),
    ("python3 .claude", "directory"),
    ("timeout 60 make lint", "runs make"),
    ("env -S 'sh -c true'", "inline code"),
    # code that comes from data: commands built from input, file names found, a shell fed by a pipe
    ("find .claude/hooks -name '*.sh' -exec sh {} ';'", "for each file found"),
    ("ls .claude/hooks | xargs -I% sh .claude/hooks/%", "runs xargs"),
    ("git ls-files | sh", "reads its program from standard input"),
    ("cat .claude/hooks/guard.sh | bash", "reads its program from standard input"),
    ("python3 - < /dev/stdin", "reads its program from standard input"),
])
def test_a_hook_that_cannot_be_pinned_is_refused_with_the_reason(project: Project, command: str, why: str) -> None:
    project.write(".claude/hooks/guard.sh", GUARD)
    project.hooks_file(command)
    found = project.discover()
    [entry] = [a for a in found.artifacts if a.kind == "hooks"]
    assert (entry.trust, entry.status) == ("untrusted", "skipped")
    assert entry.reason is not None and "cannot be pinned" in entry.reason and why in entry.reason, entry.reason
    assert found.hooks is None


@pytest.mark.parametrize(("command", "why"), [
    ('["python3", "-m", "helpers.tool"]', "-m"),
    ('["sh", "-c", ". ./helper.sh"]', "-c"),
    ('["env", "NODE_ENV=test", "npm", "test"]', "runs npm"),
    ('["node", "."]', "directory"),
    ('["find", ".", "-name", "*.sh", "-exec", "sh", "{}", ";"]', "for each file found"),
    ('["xargs", "sh"]', "runs xargs"),
    ('["bash"]', "reads its program from standard input"),
])
def test_a_tool_that_cannot_be_pinned_is_refused_with_the_reason(project: Project, command: str, why: str) -> None:
    project.write(".osprey/tools/inline.toml", f'name = "inline"\ndescription = "d"\ncommand = {command}\n')
    found = project.discover()
    [entry] = [a for a in found.artifacts if a.kind == "tool"]
    assert (entry.trust, entry.status) == ("untrusted", "skipped") and found.tools == []
    assert entry.reason is not None and "cannot be pinned" in entry.reason and why in entry.reason, entry.reason


def test_trust_refuses_what_cannot_be_pinned(project: Project) -> None:
    project.hooks_file("bash -c '. .claude/hooks/guard.sh'")
    project.write(".osprey/tools/inline.toml", 'name = "inline"\ndescription = "d"\ncommand = ["python3", "-m", "helpers.tool"]\n')
    for name in ("hooks", "inline"):
        refused = project.cli_trust(name)
        assert refused.returncode == 1 and "cannot be trusted: it cannot be pinned" in refused.stderr, refused.stdout + refused.stderr
    report = {a.name: a for a in project.discover().artifacts if a.kind in ("tool", "hooks")}
    assert "cannot be pinned" in (report["inline"].reason or "") and "-m" in (report["inline"].reason or "")
    assert report["inline"].status == "skipped" and report["hooks.toml"].status == "skipped"


def test_the_users_own_hooks_run_as_written_without_a_pin(project: Project) -> None:
    (project.home / "hooks.toml").write_text('[[hooks.Stop]]\n[[hooks.Stop.hooks]]\ncommand = "bash -c \'echo $HOME\'"\n')
    found = project.discover()
    assert [(a.layer, a.trust, a.status) for a in found.artifacts if a.kind == "hooks"] == [("user", "trusted", "active")]
    assert found.hook_sets[0].pins is None


def test_plain_hook_lines_stay_pinnable(tmp_path: Path) -> None:
    from osprey.extensions.pins import Unpinnable, plan_hook, scope_of

    scope = scope_of([tmp_path], tmp_path)
    for line in ("echo no shell today >&2; exit 2", "jq -r '.tool_input.command' | grep -q 'rm -rf' && exit 2 || exit 0",
                 '[ -f x ] && cat >/dev/null', "printf '%s' \"$OSPREY_PROJECT_DIR\"", 'python3 check.py "$OSPREY_PROJECT_DIR"'):
        plan_hook(line, cwd=str(tmp_path), project_dir=str(tmp_path), scope=scope)
    with pytest.raises(Unpinnable):
        plan_hook("cat <<EOF\nx\nEOF", cwd=str(tmp_path), project_dir=str(tmp_path), scope=scope)


def test_a_program_found_through_a_relative_path_entry_is_pinned(tmp_path: Path) -> None:
    """`PATH=bin:/usr/bin`: a bare program name can be a workspace file, so it is pinned like one."""
    from osprey.extensions.pins import plan_hook, scope_of

    (tmp_path / "bin").mkdir()
    program = tmp_path / "bin" / "myguard"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    scope = scope_of([tmp_path], tmp_path)
    cwd = os.getcwd()
    os.chdir(tmp_path)  # shutil.which answers a relative PATH entry from the process's directory
    try:
        plan = plan_hook("myguard", cwd=str(tmp_path), project_dir=str(tmp_path), scope=scope, search_path="bin:/usr/bin")
    finally:
        os.chdir(cwd)
    assert [os.path.realpath(f.path) for f in plan.files] == [str(program.resolve())]

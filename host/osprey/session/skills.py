"""A session's skills: discovered when the session starts (and again after `/reload`, at the next
turn boundary), listed in the system prompt, loaded by name through `load_skill`; the skills named
with `--skill` are loaded into the system prompt from the start."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

from ..config import Settings
from ..errors import ConfigError
from ..skills import SkillError, SkillRegistry, discover_skills
from ..tools.base import Tool, ToolSource


def user_skill_root(settings: Settings) -> Path:
    """The user's skill root: `$OSPREY_HOME/skills`, where `extension_manage` writes skills."""
    return settings.home / "skills"


def skill_cache(settings: Settings) -> Path:
    """What earlier discoveries read from each SKILL.md: `$OSPREY_HOME/cache/skills.json`."""
    return settings.home / "cache" / "skills.json"


class SkillTools(ToolSource):
    """The skills of one session and its `load_skill` tool."""

    name = "skills"

    def __init__(self, settings: Settings, *, skill_dirs: Sequence[Path] = (), preload: Sequence[str] = (),
                 warn: Callable[[str], None] = lambda _: None) -> None:
        self.settings = settings
        self.skill_dirs = list(skill_dirs)
        self.preload = list(preload)
        self.warn = warn
        self.registry = SkillRegistry()
        self.loaded: list[tuple[str, str]] = []  # (name, instructions) of the preloaded skills
        self.reload_pending = False

    def _discover(self) -> SkillRegistry:
        s = self.settings
        return discover_skills(cwd=s.cwd, workspace_root=s.workspace_root, skill_dirs=self.skill_dirs,
                               user_root=user_skill_root(s), warn=self.warn, cache=skill_cache(s))

    async def start(self) -> None:
        self.registry = await asyncio.to_thread(self._discover)
        for name in self.preload:
            try:
                self.loaded.append((name, await asyncio.to_thread(self.registry.load, name)))
            except SkillError as exc:
                raise ConfigError(f"--skill {name}: {exc.message}") from None

    def tools(self) -> Sequence[Tool]:
        from ..tools.skill_tool import load_skill_tool

        return (load_skill_tool(lambda: self.registry),)

    def request_reload(self) -> None:
        self.reload_pending = True

    def turn_boundary(self) -> bool:
        """Discover the skills again when a reload was asked for; whether it happened."""
        if not self.reload_pending:
            return False
        self.reload_pending = False
        self.registry = self._discover()
        return True

    def prompt_block(self) -> str:
        """The skills section of the system prompt, then the preloaded skills' instructions."""
        parts = [self.registry.prompt_block()]
        parts += [f"# Skill loaded at the start: {name}\n\n{text.strip()}" for name, text in self.loaded]
        return "\n\n".join(part for part in parts if part)

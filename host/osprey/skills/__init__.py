"""Skills: `SKILL.md` files of reusable instructions, found in the skill roots (`discovery`), listed
in the system prompt by name and description, and loaded by name (`SkillRegistry.load`, the
`load_skill` tool). The format is the one other agents use: YAML frontmatter with `name` and
`description` (`frontmatter`), a Markdown body, and the skill's own files beside it."""

from .discovery import BUNDLED, Skill, SkillError, SkillRegistry, discover_skills, project_roots

__all__ = ["BUNDLED", "Skill", "SkillError", "SkillRegistry", "discover_skills", "project_roots"]

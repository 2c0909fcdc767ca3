"""The session core: one session for every front end (headless, TUI, subagents, workflows)."""

"""Many agents: subagents (child sessions a tool starts), JavaScript workflows, and mixture of agents."""

"""Extensions: artifacts found in layers (the project's `.osprey` directories, `$OSPREY_HOME`,
the bundled set) that add prompts, custom tools, lifecycle hooks, tool descriptions and toolsets,
with executable trust and provenance."""

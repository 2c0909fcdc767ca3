"""The terminal UI: a textual front end of the session core (`osprey` without a subcommand)."""

"""Sessions kept on disk: the SQLite journal of every session's events, and resuming from it."""

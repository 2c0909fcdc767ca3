"""Persistent memory across sessions: one store contract (`base.MemoryStore`) with two providers,
the built-in files under `$OSPREY_HOME/memory` and a Hindsight service over HTTP."""

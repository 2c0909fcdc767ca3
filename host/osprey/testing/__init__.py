"""Test helpers for Osprey (scripted model servers and the like)."""

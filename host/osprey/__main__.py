"""`python -m osprey` runs the `osprey` command."""

from .cli import main

main(prog_name="osprey")

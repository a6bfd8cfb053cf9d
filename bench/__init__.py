"""Benchmarks that print markdown tables with the command that produced them, each run
from the project root as `python -m bench.<name>` (docs/benchmarks.md)."""

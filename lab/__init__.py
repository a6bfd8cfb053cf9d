"""A multi-host Docker Swarm on one machine: `python -m lab up|status|down` (docs/architecture.md)."""

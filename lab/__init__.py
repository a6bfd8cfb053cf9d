"""A multi-host Docker Swarm on one machine: `python -m lab up|status|down`.

See docs/architecture.md ("The lab") for the fixed names and addresses.
"""

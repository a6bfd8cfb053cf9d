"""Training entrypoint of the deepspeed-swarm image.

config, checkpoints and launch are pure Python (no torch) so the host test venv
can unit-test them; model, data and main need torch and DeepSpeed.
"""


class DssError(Exception):
    """An error with a clear, one-line cause; printed without a traceback."""

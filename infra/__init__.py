"""deepspeed-swarm's component resources; `infra.config` is the only config reader."""

"""A DeepSpeed training script in the shape of DeepSpeed's getting-started tutorial.

A small regression model learns a fixed linear map from random float32 data (no
dataset to download, CPU-friendly). DeepSpeed reads its config from
`--deepspeed_config ds_config.json`, a path relative to the working directory, and the
script saves and loads DeepSpeed checkpoints, so a relaunch resumes where it stopped.

    deepspeed train.py --deepspeed --deepspeed_config ds_config.json --steps 40
"""

import argparse
import os

import deepspeed
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

FEATURES = 32


def parse_args():
    parser = argparse.ArgumentParser(description="DeepSpeed tutorial-style training")
    # Passed by DeepSpeed's launcher to every rank.
    parser.add_argument("--local_rank", type=int, default=-1, help="local rank")
    parser.add_argument("--steps", type=int, default=100, help="train until this step")
    parser.add_argument("--save_interval", type=int, default=20, help="checkpoint every N steps")
    # Adds --deepspeed and --deepspeed_config.
    parser = deepspeed.add_config_arguments(parser)
    return parser.parse_args()


def main():
    args = parse_args()
    # Where checkpoints go: the job's checkpoint dir on a deepspeed-swarm cluster, which
    # survives a relaunch; ./checkpoints when run by hand.
    ckpt_dir = os.environ.get("DSS_CHECKPOINT_DIR", "checkpoints")

    torch.manual_seed(1234)  # the same initial weights and target on every rank
    true_w = torch.randn(FEATURES, 1)
    net = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, 1))

    # DeepSpeed starts torch.distributed (gloo on CPU), wraps the model and builds the
    # optimizer from ds_config.json.
    engine, _, _, _ = deepspeed.initialize(args=args, model=net, model_parameters=net.parameters())
    rank = engine.global_rank
    micro_batch = engine.train_micro_batch_size_per_gpu()

    step = 0
    if os.path.isfile(os.path.join(ckpt_dir, "latest")):
        # `latest` names the newest tag (global_stepN) that save_checkpoint wrote.
        path, client_state = engine.load_checkpoint(ckpt_dir)
        step = int(client_state["step"])
        if rank == 0:
            print(f"resumed at step {step} from {path}", flush=True)

    # Each rank draws its own random batches.
    gen = torch.Generator().manual_seed(1000 + 7919 * rank + step)
    engine.train()
    while step < args.steps:
        x = torch.randn(micro_batch, FEATURES, generator=gen).to(engine.device)
        y = x @ true_w.to(engine.device)
        loss = F.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        step += 1
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step % args.save_interval == 0 or step == args.steps:
            # Every rank calls it: each saves its part of the optimizer state (ZeRO).
            engine.save_checkpoint(ckpt_dir, client_state={"step": step})

    if rank == 0:
        print(f"done: {step} steps, world size {dist.get_world_size()}", flush=True)


if __name__ == "__main__":
    main()

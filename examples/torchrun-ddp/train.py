"""Plain PyTorch DistributedDataParallel, launched with torchrun.

torchrun gives every process RANK, LOCAL_RANK and WORLD_SIZE (and MASTER_ADDR and
MASTER_PORT, which init_process_group reads). The data is a random tensor dataset;
the model is a small regression net, trained on CPU with the gloo backend. Rank 0
writes a snapshot of the trained weights at the end.

    torchrun --nproc_per_node=2 train.py --epochs 2   # two processes on one machine
    torchrun train.py --epochs 2                      # a deepspeed-swarm job: the
                                                      # program adds nodes and ranks
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    parser = argparse.ArgumentParser(description="torchrun DDP example")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group(backend="gloo")
    print(f"rank {rank} (local rank {local_rank}) of {world_size} joined", flush=True)

    # The same random dataset on every rank; the sampler gives each rank its share.
    torch.manual_seed(0)
    inputs = torch.rand(1024, 16)
    targets = inputs.sum(dim=1, keepdim=True)
    dataset = TensorDataset(inputs, targets)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()  # DDP averages the gradients over the ranks here
            optimizer.step()
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs} loss {loss.item():.4f}", flush=True)

    if rank == 0:
        # A relative path, under the job's output dir on a deepspeed-swarm cluster (the
        # code dir may be read-only), else the current directory.
        os.chdir(os.environ.get("DSS_OUTPUT_DIR", "."))
        torch.save({"epochs": args.epochs, "model": model.module.state_dict()}, "snapshot.pt")
        print(f"trained {args.epochs} epochs on {world_size} ranks; wrote snapshot.pt", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

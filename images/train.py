#!/usr/bin/env python3
"""Training entrypoint of the deepspeed-swarm image (see dss_train/main.py).

Examples (inside the image, working dir /opt/dss):
  python train.py --run demo --steps 50                       # one process
  torchrun --nnodes 2 --node_rank R --nproc_per_node 1 \\
      --master_addr node1 --master_port 29500 train.py --run demo
  deepspeed --hostfile /data/hostfile --master_addr node1 --ssh_port 2222 train.py --run demo
  deepspeed --hostfile /data/hostfile --no_ssh --node_rank R --master_addr node1 train.py
Env: DS_ACCELERATOR=cpu|cuda, DSS_RUN, DSS_STEPS, DSS_CKPT_EVERY, DSS_DATA_DIR (/data),
DSS_DS_CONFIG, DSS_ZERO_STAGE, DSS_LR, DSS_HOSTFILE, DSS_MASTER_TIMEOUT,
DSS_METRICS_PORT (Prometheus metrics on this port + local rank; off when unset),
DSS_ON_RESIZE (universal|reset: the optimizer state after a world-size change).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dss_train.main import main

if __name__ == "__main__":
    sys.exit(main())

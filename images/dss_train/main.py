"""dss-train: DeepSpeed training of TinyGPT on the synthetic corpus.

Launch with `deepspeed` (pdsh over ssh with a hostfile, or --no_ssh with a node
rank), with `torchrun`, or plain `python train.py` for one process. See the
module docstring of train.py for the flags and environment.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from . import DssError
from . import checkpoints as ck
from .config import (
    apply_overrides,
    check_world_size,
    load_ds_config,
    parse_hostfile,
    validate_ds_config,
)
from .launch import needs_master_wait, read_dist_env, wait_for_master

HERE = Path(__file__).resolve().parent.parent
log = logging.getLogger("dss-train")


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="train.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", default=_env("DSS_RUN", "default"),
                   help="run name (folders under data dir)")
    p.add_argument("--steps", type=int, default=int(_env("DSS_STEPS", "200")),
                   help="train until this optimizer step")
    p.add_argument("--ckpt-every", type=int, default=int(_env("DSS_CKPT_EVERY", "10")))
    p.add_argument("--keep", type=int, default=int(_env("DSS_CKPT_KEEP", "3")),
                   help="complete checkpoints to keep")
    p.add_argument("--data-dir", default=_env("DSS_DATA_DIR", "/data"))
    p.add_argument("--ds-config", default=_env("DSS_DS_CONFIG", str(HERE / "ds_config.json")))
    p.add_argument("--zero-stage", type=int, default=(int(os.environ["DSS_ZERO_STAGE"])
                   if os.environ.get("DSS_ZERO_STAGE") else None))
    p.add_argument("--lr", type=float, default=(float(os.environ["DSS_LR"])
                   if os.environ.get("DSS_LR") else None), help="override the peak learning rate")
    p.add_argument("--hostfile", default=_env("DSS_HOSTFILE", ""),
                   help="if set, WORLD_SIZE must equal its total slots")
    p.add_argument("--master-timeout", type=float, default=float(_env("DSS_MASTER_TIMEOUT", "120")))
    p.add_argument("--seed", type=int, default=int(_env("DSS_SEED", "1234")))
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--threads", type=int, default=int(_env("DSS_THREADS", "0")),
                   help="torch CPU threads per rank (0: cores / local ranks)")
    p.add_argument("--step-sleep", type=float, default=float(_env("DSS_STEP_SLEEP", "0")),
                   help="seconds to sleep after each step (tests)")
    p.add_argument("--metrics-port", type=int, default=int(_env("DSS_METRICS_PORT", "0") or 0),
                   help="serve Prometheus metrics on this port + local rank (0: off)")
    p.add_argument("--on-resize", choices=("universal", "reset"),
                   default=_env("DSS_ON_RESIZE", "universal"),
                   help="when the world size changed since the checkpoint: re-shard the "
                        "optimizer state through DeepSpeed's universal checkpoint, or keep "
                        "the weights only and restart Adam's moments")
    p.add_argument("--local_rank", "--local-rank", type=int, default=None,
                   help=argparse.SUPPRESS)  # passed by deepspeed's launcher; LOCAL_RANK env wins
    args = p.parse_args(argv)
    if args.steps < 1 or args.ckpt_every < 1 or args.keep < 1:
        p.error("--steps, --ckpt-every and --keep must be >= 1")
    if not 0 <= args.metrics_port <= 65535:
        p.error("--metrics-port must be a TCP port (0: no metrics)")
    return args


def setup_logging(log_dir: Path, rank: int) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    fh = logging.FileHandler(log_dir / f"rank{rank}.log")
    fh.setFormatter(logging.Formatter(
        f"%(asctime)s rank{rank} %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(fh)
    root.setLevel(logging.INFO)
    # DeepSpeed's own logger does not propagate: send it to the rank file, not stdout.
    ds = logging.getLogger("DeepSpeed")
    ds.handlers = [fh]
    ds.propagate = False


def _skip_unbuildable_shm_op(acc: Any) -> None:
    """DeepSpeed's CPU accelerator loads its shm_comm op at init_distributed. The
    image pre-builds it; where it is neither pre-built nor JIT-buildable (no
    ninja), skip it instead of failing: it only speeds up inference all-reduce."""
    if acc.device_name() != "cpu":
        return
    import shutil

    import deepspeed.ops
    from deepspeed.git_version_info import installed_ops

    if not installed_ops.get("deepspeed_shm_comm") and shutil.which("ninja") is None:
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
        log.info("shm_comm op not pre-built and no ninja: skipping it")


def _rank_gpu_uuid(acc: Any, local_rank: int) -> str:
    """The UUID of the GPU this rank computes on, as CUDA names it ("" on CPU)."""
    if acc.device_name() != "cuda":
        return ""
    try:
        import torch

        return f"GPU-{torch.cuda.get_device_properties(local_rank).uuid}"
    except Exception:  # an older torch without .uuid: NVML finds it by index instead
        return ""


def _start_metrics(args: argparse.Namespace, acc: Any, rank: int, world: int) -> Any:
    """The rank's Prometheus metrics when --metrics-port is set (else None)."""
    if not args.metrics_port:
        return None
    from . import metrics as rank_metrics

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    return rank_metrics.from_env(os.environ, port=args.metrics_port, run=args.run, rank=rank,
                                 local_rank=local_rank, world_size=world,
                                 target_steps=args.steps,
                                 gpu_uuid=_rank_gpu_uuid(acc, local_rank))


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines of steps after `step` (they are about to be redone)."""
    if not path.is_file():
        return
    keep = [line for line in path.read_text().splitlines()
            if line.strip() and json.loads(line).get("step", 0) <= step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(f"{line}\n" for line in keep))
    os.replace(tmp, path)


def _classic_tcpstore_without_libuv() -> None:
    """Debian's torch has no libuv, but the TCPStore that env:// rendezvous makes under
    torchrun (agent store) asks for it by default. With USE_LIBUV=0 default to the
    classic store (see also the image's torchrun wrapper)."""
    if os.environ.get("USE_LIBUV", "1") != "0":
        return
    import torch.distributed.rendezvous  # noqa: F401 - the name is shadowed by a function

    rdzv = sys.modules["torch.distributed.rendezvous"]
    base = rdzv.TCPStore

    class TCPStore(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("use_libuv", False)
            super().__init__(*args, **kwargs)

    rdzv.TCPStore = TCPStore  # type: ignore[misc]


class StopFlag:
    def __init__(self) -> None:
        self.signum = 0
        signal.signal(signal.SIGTERM, self._handler)
        signal.signal(signal.SIGINT, self._handler)

    def _handler(self, signum: int, _frame: Any) -> None:
        self.signum = signum


def _universal(root: Path, tag: str, rank: int, dist: Any) -> Path | None:
    """Rank 0 converts checkpoint `tag` to its universal form while the others wait
    (the wait counts against --master-timeout); every rank gets the folder to load
    from, or None when the conversion failed (said on rank 0's output)."""
    out: list[Any] = [None]
    if rank == 0:
        t0 = time.monotonic()
        try:
            out[0] = str(ck.to_universal(root, tag, sys.executable))
            log.info("universal checkpoint of %s ready in %.1fs", tag, time.monotonic() - t0)
        except DssError as e:
            log.warning("%s", e)
            print(f"[dss-train] {e}; resuming the weights only", flush=True)
    dist.broadcast_object_list(out, src=0)
    return Path(out[0]) if out[0] else None


def train(args: argparse.Namespace) -> int:
    dist_env = read_dist_env(os.environ)
    if args.hostfile:
        hf = Path(args.hostfile)
        if not hf.is_file():
            raise DssError(f"hostfile not found: {hf}")
        check_world_size(parse_hostfile(hf.read_text(), str(hf)), dist_env.world_size, str(hf))
    cfg = validate_ds_config(apply_overrides(load_ds_config(args.ds_config), args.zero_stage,
                                             args.lr),
                             dist_env.world_size, args.ds_config)
    stop = StopFlag()  # before the slow imports, so an early SIGTERM is not lost

    data_dir = Path(args.data_dir)
    log_dir, ckpt_root = data_dir / "logs" / args.run, data_dir / "checkpoints" / args.run
    try:
        ckpt_root.mkdir(parents=True, exist_ok=True)
        setup_logging(log_dir, dist_env.rank)
    except OSError as e:
        raise DssError(f"cannot write under {data_dir}: {e.strerror}") from None
    if "RANK" not in os.environ:  # single process: give torch.distributed an env
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT", "29500"))
    os.environ.setdefault("LOCAL_RANK", str(dist_env.local_rank))  # DeepSpeed insists on it
    # Debian's torch has no libuv; the classic TCPStore works with every build.
    os.environ.setdefault("USE_LIBUV", "0")
    if needs_master_wait(os.environ, dist_env):
        wait_for_master(dist_env.master_addr, dist_env.master_port, args.master_timeout)

    # OpenBLAS' own threads fight torch's (measured 10x slower GEMMs on a busy host):
    # torch's intra-op threads do the parallel work, BLAS runs single-threaded.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import deepspeed
    import torch
    import torch.distributed as dist
    from deepspeed.accelerator import get_accelerator

    from .data import SyntheticCorpus
    from .model import TinyGPT

    acc = get_accelerator()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if acc.device_name() == "cpu":
        torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // local_world))
    _skip_unbuildable_shm_op(acc)
    _classic_tcpstore_without_libuv()
    try:
        deepspeed.init_distributed(dist_backend=acc.communication_backend_name(),
                                   auto_mpi_discovery=False,
                                   timeout=timedelta(seconds=args.master_timeout))
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DssError(f"could not join the process group at {dist_env.master_addr}:"
                       f"{dist_env.master_port} (rank {dist_env.rank}/{dist_env.world_size}, "
                       f"backend {acc.communication_backend_name()}): {first}") from None
    rank, world = dist.get_rank(), dist.get_world_size()
    log.info("joined: rank %d/%d backend %s device %s", rank, world,
             acc.communication_backend_name(), acc.device_name())

    # Resume: rank 0 chooses (shared data dir), everyone loads the same tag. Chosen
    # before DeepSpeed is initialised: a universal load is a setting of the engine.
    choice: list[Any] = [None]
    if rank == 0:
        chosen, skipped = ck.select_latest(ckpt_root)
        for note in skipped:
            log.warning("skipping checkpoint %s", note)
            print(f"[dss-train] skipping checkpoint {note}", flush=True)
        if chosen is not None:
            choice[0] = (*chosen, ck.saved_world_size(ckpt_root / chosen[1]))
    dist.broadcast_object_list(choice, src=0)
    load_root, resized, universal = ckpt_root, False, False
    if choice[0] is not None:
        saved_world = choice[0][2]
        # ZeRO partitions the optimizer state by rank: with another world size (a host
        # added or removed) DeepSpeed refuses it. The universal checkpoint holds it per
        # parameter and re-shards it; without it (or if the conversion fails) keep the
        # weights (ZeRO's fp32 partitions are merged and re-split) and restart Adam.
        resized = saved_world is not None and saved_world != world
        if resized and args.on_resize == "universal":
            converted = _universal(ckpt_root, choice[0][1], rank, dist)
            if converted is not None:
                load_root, universal = converted, True
                cfg = {**cfg, "checkpoint": {**cfg.get("checkpoint", {}), "load_universal": True}}

    torch.manual_seed(args.seed)
    model = TinyGPT(args.vocab, args.seq_len, args.dim, args.layers, args.heads)
    n_params = sum(p.numel() for p in model.parameters())
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=cfg)
    device = engine.device
    mbs, ga = cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]
    corpus = SyntheticCorpus(args.vocab, args.seq_len, args.seed)

    prom = _start_metrics(args, acc, rank, world)
    start = 0
    if choice[0] is not None:
        step0, tag, saved_world = choice[0]
        path, client = engine.load_checkpoint(str(load_root), tag=tag,
                                              load_optimizer_states=universal or not resized)
        if path is None:
            raise DssError(f"could not load checkpoint {load_root / tag}")
        if resized and rank == 0:
            how = ("optimizer state re-sharded (universal checkpoint)" if universal
                   else "optimizer state reset")
            log.warning("world size %d -> %d: weights resumed, %s", saved_world, world, how)
            print(f"[dss-train] world size changed {saved_world} -> {world}: weights "
                  f"resumed, {how}", flush=True)
        start = int((client or {}).get("step", step0))
        if prom is not None:
            manifest = ckpt_root / tag / ck.MANIFEST
            prom.resumed(start, manifest.stat().st_mtime if manifest.is_file() else None)
        if rank == 0:
            _truncate_metrics(log_dir / "metrics.jsonl", start)
        log.info("resumed from %s at step %d", tag, start)
        if rank == 0:
            print(f"[dss-train] resumed from {ckpt_root / tag}, next step {start + 1}", flush=True)
    elif rank == 0:
        print(f"[dss-train] run {args.run}: {n_params / 1e6:.2f}M params, world {world}, "
              f"zero stage {cfg.get('zero_optimization', {}).get('stage', 0)}, "
              f"device {acc.device_name()}, starting at step 1", flush=True)

    metrics = (log_dir / "metrics.jsonl").open("a") if rank == 0 else None

    def save(step: int) -> None:
        tag = ck.tag_for_step(step)
        engine.save_checkpoint(str(ckpt_root), tag=tag,
                               client_state={"step": step, "run": args.run},
                               save_latest=False)
        dist.barrier()
        if rank == 0:
            ck.write_manifest(ckpt_root / tag, step, {"world_size": world, "run": args.run})
            for old in ck.prune(ckpt_root, args.keep):
                log.info("pruned checkpoint %s", old)
            print(f"[dss-train] checkpoint {tag} saved", flush=True)
        dist.barrier()
        if prom is not None:
            prom.checkpoint_done(step)
        log.info("checkpoint %s complete", tag)

    engine.train()
    step = start
    tokens_per_sample = args.seq_len
    while step < args.steps:
        step += 1
        t0 = time.perf_counter()
        loss_sum = 0.0
        compute_s = 0.0  # this rank's own work: batch and forward (no collective waits)
        for m in range(ga):
            c0 = time.perf_counter()
            batch = corpus.batch(step, m, rank, world, ga, mbs).to(device)
            loss = engine(batch)
            compute_s += time.perf_counter() - c0
            engine.backward(loss)
            engine.step()
            loss_sum += float(loss.detach())
        # One collective per step: mean loss over ranks, and whether any rank was told to stop.
        t = torch.tensor([loss_sum / ga, float(stop.signum != 0)], dtype=torch.float64,
                         device=device)
        dist.all_reduce(t)
        loss_avg, stopping = t[0].item() / world, t[1].item() > 0
        dt = time.perf_counter() - t0
        samples = mbs * ga * world
        if prom is not None:
            prom.step_done(step, loss_sum / ga, mbs * ga, dt, compute_s)
        if metrics is not None:
            lr = engine.get_lr()[0] if engine.get_lr() else 0.0
            rec = {"step": step, "loss": round(loss_avg, 6), "lr": lr,
                   "samples_per_s": samples / dt,
                   "tokens_per_s": samples * tokens_per_sample / dt, "step_time_s": dt,
                   "world_size": world, "time": time.time()}
            metrics.write(json.dumps(rec) + "\n")
            metrics.flush()
            print(f"step {step}/{args.steps} loss {loss_avg:.4f} lr {lr:.2e} "
                  f"{samples / dt:.1f} samples/s {samples * tokens_per_sample / dt:.0f} tok/s",
                  flush=True)
        log.info("step %d loss %.6f %.3fs", step, loss_avg, dt)
        if stopping or step % args.ckpt_every == 0 or step == args.steps:
            save(step)
        if stopping:
            log.info("stop requested (signal): checkpoint saved at step %d, exiting", step)
            if rank == 0:
                print(f"[dss-train] stopped by signal after step {step}; checkpoint saved",
                      flush=True)
            break
        if args.step_sleep:
            time.sleep(args.step_sleep)
    if metrics is not None:
        metrics.close()
    if prom is not None:
        prom.close()
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return train(args)
    except DssError as e:
        print(f"dss-train: error: {e}", file=sys.stderr, flush=True)
        logging.getLogger("dss-train").error("%s", e)
        return 2

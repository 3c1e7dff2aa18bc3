"""One run over N processes (``torchrun``): data-parallel on-policy training.

``torchrun --nproc_per_node=N -m genpol.train ...`` is detected from the variables torchrun sets
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``); there is no config switch, so a run's
config is the same whether it runs on one process or on N. ``GENPOL_DISTRIBUTED=0`` ignores them.
With ``WORLD_SIZE=1`` (or no torchrun) nothing here runs and nothing changes.

What the N processes (ranks) share, and how:

* Seeds: rank 0 uses the run's ``seed``; rank r > 0 a seed derived from ``(seed, r)``. Each rank
  builds its own envs from its seed, so it collects different episodes.
* Parameters: broadcast from rank 0 after the start or the resume (one flattened call), then kept
  equal because every rank applies the same averaged gradient to the same optimizer state.
* Gradients: ``average_gradients`` all-reduces all of them, with the step's diagnostics (KL,
  clip fraction) in the same flattened buffer, so the early stop on ``target_kl`` and the
  KL-adaptive learning rate decide the same on every rank. Each rank's loss is the mean over its
  own minibatch of equal size, so the average of the ranks' gradients is the gradient of the mean
  over all ranks' samples. TRPO averages its gradient, Fisher-vector products, line-search
  surrogate and KL, and normalizes advantages with the global mean and std.
* Observation (and reward) normalization: ``SyncedRunningMeanStd`` folds in the moments of every
  rank's batch at every step, so all ranks normalize with the same statistics.
* Env steps: ``global_step`` counts the env steps of all ranks, so ``total_steps`` is the run's budget.
* I/O: rank 0 alone holds the run directory, writes the config, logs, evaluates, records videos and
  writes checkpoints. A checkpoint carries each rank's own env state, last observation and RNG
  states (``training_state["distributed"]``), gathered to rank 0 when it saves, so a resume with the
  same number of ranks continues every rank where it was. All ranks read the checkpoint.

Not covered (a ``ConfigError`` says so): off-policy learners (SAC/RLPD), ``pipeline=offline_to_online``
and ``learner.compile=true``. Per-minibatch advantage normalization of PPO stays local to each rank's
minibatch (as in rsl_rl's multi-GPU PPO). The logged episode statistics are all ranks' episodes.
"""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from genpol.algorithms.registry import LEARNERS, learner
from genpol.checkpoint import random_states, restore_random_states
from genpol.collectives import broadcast_modules, is_main, rank, world_size
from genpol.envs.core import VectorEnvWrapper
from genpol.envs.wrappers import RunningMeanStd
from genpol.errors import SEED_LIMIT, CheckpointError, ConfigError


def launched_by_torchrun() -> bool:
    """torchrun (or another env:// launcher) started more than one process for this run."""
    if os.environ.get("GENPOL_DISTRIBUTED", "1") == "0":
        return False
    needed = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    return all(name in os.environ for name in needed) and int(os.environ["WORLD_SIZE"]) > 1


def rank_seed(seed: int, rank_index: int) -> int:
    """Rank 0 keeps ``seed``; other ranks get a hash of ``(seed, rank)``, far from small sweep seeds, below
    ``SEED_LIMIT`` as every seed (a 32-bit hash was refused by the config check, and EnvPool's int32 seeds)."""
    if rank_index == 0:
        return seed
    return int(np.random.SeedSequence([seed, rank_index]).generate_state(1)[0]) % SEED_LIMIT


def check_supported(cfg: Any) -> None:
    """Refuse, naming the key, what data-parallel training does not cover yet."""
    if not learner(cfg.learner.name).torchrun:
        raise ConfigError(f"learner={cfg.learner.name} under torchrun: distributed training covers "
                          f"{', '.join(name for name, row in LEARNERS.items() if row.torchrun)} for now; run "
                          f"{cfg.learner.name} in one process")
    if cfg.pipeline.name != "online":
        raise ConfigError(f"pipeline={cfg.pipeline.name} under torchrun: distributed training supports "
                          "pipeline=online only for now")
    if getattr(cfg.learner, "compile", False):
        raise ConfigError("learner.compile=true under torchrun: the compiled step has no place for the gradient "
                          "all-reduce; set learner.compile=false")
    if cfg.device.startswith("cuda:"):
        raise ConfigError(f"device={cfg.device} under torchrun: use device=cuda, each rank takes cuda:LOCAL_RANK")


def init_from_torchrun(cfg: Any) -> Any:
    """Join the process group torchrun set up (gloo on CPU, NCCL on CUDA); return this rank's config
    (its own seed). Call once, before anything is built."""
    check_supported(cfg)
    on_cuda = cfg.device.startswith("cuda")
    if on_cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))  # "cuda" now means this rank's GPU
    if not dist.is_initialized():
        # evaluation and checkpoints on rank 0 keep the others waiting: allow a long wait
        dist.init_process_group("nccl" if on_cuda else "gloo", timeout=timedelta(minutes=60))
    return dataclasses.replace(cfg, seed=rank_seed(cfg.seed, rank()))


def shutdown(wait_for_others: bool = True) -> None:
    """Leave the process group. ``wait_for_others``: first wait until every rank got here (gloo
    aborts a process that tears its group down while a peer still talks to it); False after an
    error, when the others may never come."""
    if dist.is_initialized():
        if wait_for_others:
            dist.barrier()
        dist.destroy_process_group()


# ---------------------------------------------------------------- normalizer statistics
class SyncedRunningMeanStd(RunningMeanStd):
    """``RunningMeanStd`` whose every update folds in the batch of all ranks: the per-rank batch
    moments are gathered, combined exactly (Chan's rule over equal-shape parts) in rank order, then
    folded in, so every rank ends with the same statistics."""

    def update(self, batch: torch.Tensor) -> None:
        batch = batch.to(torch.float64)
        batch_var, batch_mean = torch.var_mean(batch, dim=0, correction=0)
        count = torch.full((1,), float(batch.shape[0]), dtype=torch.float64, device=batch.device)
        local = torch.cat([count, batch_mean.reshape(-1), batch_var.reshape(-1)])
        gathered = [torch.empty_like(local) for _ in range(world_size())]
        dist.all_gather(gathered, local)
        parts = torch.stack(gathered)  # [R, 1 + 2 D]
        size = batch_mean.numel()
        counts, means, variances = parts[:, :1], parts[:, 1:1 + size], parts[:, 1 + size:]
        total = counts.sum()
        global_mean = (counts * means).sum(0) / total
        global_var = (counts * (variances + (means - global_mean).square())).sum(0) / total
        self.fold(global_mean.reshape(batch_mean.shape), global_var.reshape(batch_var.shape), int(total))


def synchronize_normalizers(env: Any) -> int:
    """Swap every running statistic in ``env``'s wrapper stack (observation normalizer, reward
    scaler) for a ``SyncedRunningMeanStd`` holding the same state; returns how many."""
    swapped = 0
    layer = env
    while isinstance(layer, VectorEnvWrapper):
        stats = getattr(layer, "stats", None)
        if isinstance(stats, RunningMeanStd) and not isinstance(stats, SyncedRunningMeanStd):
            synced = SyncedRunningMeanStd(tuple(stats.mean.shape), stats.mean.device)
            synced.load_state_dict(stats.state_dict())
            layer.stats = synced
            swapped += 1
        layer = layer.env
    return swapped


# ---------------------------------------------------------------- the runner: start, checkpoints, resume
def prepare_runner(runner: Any) -> None:
    """After the (possible) resume, before the first iteration: rank 0's parameters everywhere. The normalizers
    are synchronized before the resume (``synchronize_normalizers``), since a resume can update them: on an env
    whose state cannot be restored, ``EnvRunner.load`` starts new episodes, whose first observations each rank
    folded into its own statistics, which then never agreed again."""
    broadcast_modules(runner.algorithm.networks())


def _rank_state(runner: Any) -> dict[str, Any]:
    """What differs between ranks: each rank's envs, last observation and random streams."""
    return {"env": runner.env.state_dict(), "obs": runner.obs, **random_states(),
            "shuffle_rng": runner.algorithm.shuffle_generator.get_state()}


def gather_rank_states(runner: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Add every rank's own state to ``state`` on rank 0 (``state["distributed"]``). A collective:
    every rank calls it when a checkpoint is written."""
    mine = _rank_state(runner)
    everyone = [None] * world_size() if is_main() else None
    dist.gather_object(mine, everyone, dst=0)
    if is_main():
        state["distributed"] = {"world_size": world_size(), "ranks": everyone}
    return state


def load_rank_state(runner: Any, state: dict[str, Any]) -> None:
    """After ``runner.load``: take this rank's own part of a checkpoint written by N ranks."""
    saved = state.get("distributed")
    saved_size = 1 if saved is None else int(saved["world_size"])
    if saved_size != world_size():
        raise CheckpointError(f"the checkpoint was written by {saved_size} process(es) and this run has "
                              f"{world_size()}: resume with torchrun --nproc_per_node={saved_size} (in all), "
                              "or start a new run_dir")
    if saved is None:
        return
    own = saved["ranks"][rank()]
    runner.env.load_state_dict(own["env"])
    runner.obs = own["obs"].to(runner.algorithm_device())
    restore_random_states(own)
    runner.algorithm.shuffle_generator.set_state(own["shuffle_rng"])

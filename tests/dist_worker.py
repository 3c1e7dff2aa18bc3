"""Run under ``torchrun --nproc_per_node=2`` by ``test_distributed.py``; its functions are also the
one-process reference there.

``python -m torch.distributed.run --standalone --nproc_per_node=2 tests/dist_worker.py update OUT``
    one rank's share of the same fixed batch through a PPO-clip update (3 minibatch steps with a
    norm clip and a KL-adaptive learning rate, then one whose target_kl early stop one half alone
    would trigger), a TRPO policy step and the observation normalizer;
    each rank writes ``OUT/update_rank<r>.pt``.
``... tests/dist_worker.py train OUT <overrides...>``
    ``genpol.train``'s own pipeline on this rank's config; each rank writes its final head, critic
    and normalizer statistics to ``OUT/train_rank<r>.pt``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch

from genpol.envs.wrappers import ObservationNormalizer, RunningMeanStd
from genpol import collectives, distributed
from genpol.heads.gaussian import GaussianHead
from genpol.nets import ValueNetwork
from genpol.storage import Batch
from genpol.updaters.losses import PPOClipLoss
from genpol.updaters.minibatch import MinibatchUpdater
from genpol.updaters.schedules import AdaptiveLR
from genpol.updaters.trpo import TRPOUpdater

SAMPLES, OBS_DIM, ACT_DIM = 64, 3, 2


def networks() -> tuple[GaussianHead, ValueNetwork]:
    torch.manual_seed(0)
    return GaussianHead(OBS_DIM, ACT_DIM, hidden_sizes=(16, 16)), ValueNetwork(OBS_DIM, (16, 16))


def full_batch(head: GaussianHead) -> Batch:
    """A fixed batch of ``SAMPLES`` samples drawn by ``head`` (the same on every rank)."""
    generator = torch.Generator().manual_seed(1)
    obs = torch.randn(SAMPLES, OBS_DIM, generator=generator)
    torch.manual_seed(2)
    with torch.no_grad():
        _, record = head.sample(obs)
    advantages, returns, values = torch.randn(3, SAMPLES, generator=generator)
    return Batch(obs, record, advantages, returns, values)


def share(batch: Batch, rank: int, world: int) -> Batch:
    """Rank ``rank``'s contiguous 1/world of ``batch``."""
    part = slice(rank * SAMPLES // world, (rank + 1) * SAMPLES // world)
    return Batch(batch.obs[part], {k: v[part] for k, v in batch.record.items()}, batch.advantages[part],
                 batch.returns[part], batch.values[part])


def updates(rank: int, world: int) -> dict[str, Any]:
    """Parameters and diagnostics after the updates on rank ``rank``'s share (world=1: the full batch)."""
    head, critic = networks()
    batch = full_batch(head)
    mine = share(batch, rank, world)
    # per-minibatch advantage normalization is per rank by design; the mean-reduced loss is not
    loss = PPOClipLoss(clip_range=0.05, normalize_advantage=False)
    ppo = MinibatchUpdater(head, critic, loss, lr=3e-2, max_grad_norm=0.5,
                           adaptive_lr=AdaptiveLR(3e-2, target_kl=1e-4))
    head.begin_update()
    ppo_steps = [{k: float(v) for k, v in ppo.eager_step(mine)[0].items()} for _ in range(3)]
    # a target_kl that one half's KL passes and the mean does not: a rank on its own would stop early
    with torch.no_grad():
        half_kls = [float(ppo.minibatch_loss(half.obs, half.record, half.advantages, half.returns, half.values)[1]
                          ["approx_kl"]) for half in (share(batch, 0, 2), share(batch, 1, 2))]
    ppo.target_kl = (sum(half_kls) / 2 + max(half_kls)) / 2 / 1.5
    stepped = ppo.eager_step(mine)[1]
    after_ppo = {f"ppo.{k}": v.detach().clone() for k, v in [*head.state_dict().items(),
                                                                  *critic.state_dict().items()]}
    head, critic = networks()
    trpo = TRPOUpdater(head, critic, target_kl=0.01, cg_iterations=100, chunk_size=16)
    trpo_stats = trpo.policy_step(mine.obs, mine.record, mine.advantages)
    after_trpo = {f"trpo.{k}": v.detach().clone() for k, v in head.state_dict().items()}
    stats_type = distributed.SyncedRunningMeanStd if world > 1 else RunningMeanStd
    stats = stats_type((OBS_DIM,), torch.device("cpu"))
    for step in range(3):
        observations = torch.randn(16, OBS_DIM, generator=torch.Generator().manual_seed(10 + step)) * 3 + 1
        stats.update(observations[rank * 16 // world:(rank + 1) * 16 // world])
    return {**after_ppo, **after_trpo, "ppo_steps": ppo_steps, "half_kls": half_kls, "stepped": stepped,
            "target_kl": ppo.target_kl, "trpo": trpo_stats,
            "normalizer": stats.state_dict()}


def train(run_dir: str, overrides: list[str]) -> dict[str, Any]:
    """``genpol.train``'s pipeline under this rank's config; the final networks and statistics."""
    from hydra import compose, initialize_config_dir

    import genpol.pipelines.online as online
    from genpol.configure import register_configs, validate
    from genpol.train import run_training

    register_configs()
    with initialize_config_dir(str(Path(__file__).resolve().parent.parent / "configs"), version_base="1.3"):
        cfg = validate(compose("config", overrides=overrides))
    runners = []
    run_phase = online.run_phase
    online.run_phase = lambda runner, *args, **kwargs: (runners.append(runner), run_phase(runner, *args, **kwargs))
    run_training(cfg, run_dir)
    runner = runners[0]
    normalizer = runner.env
    while not isinstance(normalizer, ObservationNormalizer):
        normalizer = normalizer.env
    return {"head": runner.algorithm.head.state_dict(), "critic": runner.algorithm.critic.state_dict(),
            "obs_stats": normalizer.stats.state_dict(), "global_step": runner.global_step,
            "seed": runner.seed, "recent_returns": list(runner.recent_returns)}


if __name__ == "__main__":
    mode, out = sys.argv[1], Path(sys.argv[2])
    rank = int(os.environ["RANK"])
    if mode == "update":
        torch.distributed.init_process_group("gloo")
        result = updates(rank, collectives.world_size())
        distributed.shutdown()
    else:  # run_training joins torchrun's process group and leaves it
        result = train(str(out / "run"), sys.argv[3:])
    torch.save(result, out / f"{mode}_rank{rank}.pt")

"""GoRL's collection of (state, pre-tanh action) pairs: written in place against a list of per-step tensors.

Before (2026-12-06): ``collect_pre_tanh_actions`` appended every step's observations and pre-tanh
actions to two lists and concatenated them at the end, the usual pattern. After: both go into
preallocated CPU tensors of the collection's size (``genpol.pipelines.gorl.distill``). Each method runs
in a fresh process, with the training entry points' allocator settings (``retain_freed_memory``), on
genpol's MultiGoal with ``--envs`` envs and a default ``LatentDecoderHead``: a warm-up collection of
20k steps, then ``--steps`` steps. Reported: the growth of the process's peak RSS over the warm-up's
(what the collection adds), the bytes of one copy of the pairs, and the wall time. The methods
alternate over ``--rounds``; medians are reported.

    python bench/gorl_collection.py [--steps 4000000] [--envs 2000] [--rounds 2]

Writes ``bench/results/gorl_collection.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Any

from common import machine, write_results


def list_then_cat(head: Any, env: Any, steps: int, seed: int) -> dict[str, Any]:
    """The loop before the change: per-step tensors in lists, one ``torch.cat`` at the end."""
    import torch

    torch.manual_seed(seed)
    obs = env.reset(seed=seed)
    all_obs, all_actions, env_steps = [], [], 0
    while env_steps < steps:
        pre_tanh, _ = head.sample_pre_tanh(obs)
        all_obs.append(obs)
        all_actions.append(pre_tanh)
        obs, *_ = env.step(torch.tanh(pre_tanh))
        env_steps += env.num_envs
    return {"obs": torch.cat(all_obs).cpu(), "actions": torch.cat(all_actions).cpu(), "env_steps": env_steps}


def measure(method: str, steps: int, num_envs: int) -> dict[str, float]:
    """One method in this process: peak RSS growth (MiB), one copy of the pairs (MiB), seconds."""
    import resource
    import time

    import torch

    from genpol import envs
    from genpol.allocator import retain_freed_memory
    from genpol.heads.latent import LatentDecoderHead
    from genpol.pipelines.gorl.distill import collect_pre_tanh_actions

    retain_freed_memory()
    torch.set_num_threads(1)
    collect = collect_pre_tanh_actions if method == "in_place" else list_then_cat
    env = envs.make("genpol:MultiGoal", num_envs=num_envs, seed=0)
    head = LatentDecoderHead(env.obs_dim, env.act_dim)
    with torch.no_grad():
        collect(head, env, 20_000, 0)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        data = collect(head, env, steps, 0)
        seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    one_copy = (data["obs"].numel() + data["actions"].numel()) * 4
    return {"peak_rss_growth_mib": (peak - before) / 1024, "one_copy_mib": one_copy / 2**20, "seconds": seconds,
            "rows": len(data["obs"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4_000_000)
    parser.add_argument("--envs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", choices=("in_place", "list_then_cat"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.steps, args.envs)))
        return
    runs: dict[str, list[dict[str, float]]] = {"in_place": [], "list_then_cat": []}
    for _ in range(args.rounds):
        for method in runs:
            output = subprocess.run([sys.executable, __file__, "--child", method, "--steps", str(args.steps),
                                     "--envs", str(args.envs)], check=True, capture_output=True, text=True).stdout
            runs[method].append(json.loads(output.strip().splitlines()[-1]))
    table = {method: {key: statistics.median(run[key] for run in results) for key in results[0]}
             for method, results in runs.items()}
    print(f"{'method':<15}{'rows':>10}{'one copy MiB':>14}{'peak RSS growth MiB':>21}{'seconds':>9}")
    for method, row in table.items():
        print(f"{method:<15}{row['rows']:>10.0f}{row['one_copy_mib']:>14.1f}{row['peak_rss_growth_mib']:>21.1f}"
              f"{row['seconds']:>9.1f}")
    ratio = table["in_place"]["peak_rss_growth_mib"] / table["list_then_cat"]["peak_rss_growth_mib"]
    print(f"in place / list then cat: peak RSS growth {ratio:.3f}x, time "
          f"{table['in_place']['seconds'] / table['list_then_cat']['seconds']:.2f}x")
    write_results("gorl_collection.json", {"machine": machine(), "steps": args.steps, "envs": args.envs,
                                      "rounds": args.rounds, "median": table, "runs": runs})


if __name__ == "__main__":
    main()

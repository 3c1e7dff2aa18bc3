"""Latency per action of the policy heads: consistency (T = 2) against DPPO diffusion (K = 20),
FPO (10 Euler steps) and the Gaussian, at batch 1 (one robot) and batch 256 (vectorized envs).

Each head is built from its ``configs/policy`` group defaults for Hopper's sizes (11 observations,
3 actions), so the numbers are what a user gets; ``*-256x3`` rows rebuild DPPO and FPO with the
consistency head's 3 x 256 Mish network, which separates the step count from the network size.
DPPO's default acts in chunks of 4 actions: its row is one single-action call (act_steps = 1);
``dppo-k20-chunk4`` divides the chunk's call by the 4 actions it yields.

Timing: ``head.act(obs, deterministic=False)`` under ``torch.no_grad``, one torch thread, eager,
after warm-up; the median over repeats (the minimum too). The target is consistency
<= 0.15 x DPPO's latency. The machine is shared, so the load average is recorded with the numbers.

    python bench/latency.py [--repeats 200]

Writes ``bench/results/latency.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from common import date_stamp, machine, write_results

OBS_DIM, ACT_DIM = 11, 3

HEADS = {  # name: (policy group, head overrides, actions per call)
    "consistency-t2": ("consistency", {}, 1),
    "dppo-k20": ("diffusion", {"act_steps": 1, "horizon_steps": 1, "ft_denoising_steps": 10}, 1),
    "dppo-k20-chunk4": ("diffusion", {}, 4),
    "dppo-k20-256x3": ("diffusion", {"act_steps": 1, "horizon_steps": 1, "hidden_sizes": [256, 256, 256]}, 1),
    "fpo-10": ("fpo", {}, 1),
    "fpo-10-256x3": ("fpo", {"hidden_sizes": [256, 256, 256], "activation": "mish"}, 1),
    "gaussian": ("gaussian", {}, 1),
}


def build(group: str, overrides: dict) -> tuple[torch.nn.Module, int]:
    from genpol.configure import validate
    from genpol.api import compose_config
    from genpol.build import make_head

    cfg = validate(compose_config(["env=hopper", f"policy={group}", "run_dir=/tmp/unused",
                                   "pipeline=offline_to_online", "dataset.path=unused.hdf5"]))
    for key, value in overrides.items():
        setattr(cfg.policy, key, value)
    act_steps = getattr(cfg.policy, "act_steps", 1)
    return make_head(cfg.policy, OBS_DIM, ACT_DIM * act_steps).eval(), act_steps


def time_calls(head: torch.nn.Module, batch: int, repeats: int) -> tuple[float, float]:
    """Median and minimum seconds of one ``act`` call on ``batch`` observations."""
    obs = torch.randn(batch, OBS_DIM)
    times = []
    with torch.no_grad():
        for _ in range(10):
            head.act(obs, deterministic=False)
        for _ in range(repeats):
            start = time.perf_counter()
            head.act(obs, deterministic=False)
            times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows = {}
    for name, (group, overrides, actions_per_call) in HEADS.items():
        head, act_steps = build(group, overrides)
        assert act_steps == actions_per_call, (name, act_steps)
        rows[name] = {}
        for batch in (1, 256):
            median, minimum = time_calls(head, batch, args.repeats if batch == 1 else max(args.repeats // 4, 10))
            rows[name][f"batch_{batch}"] = {"ms_per_call": 1e3 * median, "ms_per_call_min": 1e3 * minimum,
                                            "us_per_action": 1e6 * median / (batch * actions_per_call)}
            print(f"{name:18s} batch {batch:3d}: {1e3 * median:8.3f} ms/call, "
                  f"{1e6 * median / (batch * actions_per_call):9.2f} us/action", flush=True)
    ratios = {f"batch_{b}": {other: rows["consistency-t2"][f"batch_{b}"]["us_per_action"] / rows[other][f"batch_{b}"]["us_per_action"]
                             for other in rows if other != "consistency-t2"} for b in (1, 256)}
    for key, value in ratios.items():
        print(f"consistency / dppo-k20 per action, {key}: {value['dppo-k20']:.3f} (target <= 0.15)")
    write_results("latency.json", {
        "benchmark": "latency per action, head.act(deterministic=False), eager, 1 torch thread",
        "date": date_stamp(), "obs_dim": OBS_DIM, "act_dim": ACT_DIM,
        "load_average": os.getloadavg(), "torch": machine()["torch"], "repeats_batch_1": args.repeats,
        "heads": rows, "consistency_over": ratios, "target": "consistency-t2 / dppo-k20 <= 0.15",
    })


if __name__ == "__main__":
    main()

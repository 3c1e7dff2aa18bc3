"""Where a PPO minibatch step's time goes at stable-baselines3's default settings (HalfCheetah-v5, 8 envs
x 2048 steps, minibatch 64, 10 epochs, 64-64 tanh networks, no normalization), with genpol's compiled
minibatch step (``learner.compile=true``).

At these settings an update is 2560 minibatch steps of 64 samples, so the per-step overhead decides
the rate, not arithmetic (issue 17's "SB3's defaults >= 5x SB3" target). This script times one update,
splits it with ``torch.profiler`` into the compiled graph (forward, backward, clip and Adam as one
inductor kernel set), the minibatch gather, and everything else (Python, dynamo's guards, the
adaptive-lr read-back), and times the compiled graph's own kernels against the whole step. It also
times the rollout's collection at the same settings, the other half of an iteration.

    python bench/ppo_step_profile.py

Writes ``bench/results/ppo_step_profile.json`` and prints a table.
"""

from __future__ import annotations

import time

import torch

from common import date_stamp, machine, write_results

SB3_DEFAULTS = ["env=halfcheetah", "env.num_envs=8", "env.normalize_obs=false", "env.normalize_reward=false",
                "learner.compile=true"]


def build(overrides: list[str]):
    from genpol.algorithms import make_algorithm
    from genpol.api import compose_config
    from genpol.build import env_stack, make_env, make_head
    from genpol.configure import validate
    from genpol.runners.onpolicy import OnPolicyRunner

    cfg = validate(compose_config(["run_dir=/tmp/unused", *overrides]))
    torch.manual_seed(0)
    env = make_env(cfg.env, gamma=cfg.learner.gamma, seed=0, device=cfg.device, stack=env_stack(cfg.policy))
    head = make_head(cfg.policy, env.obs_dim, env.act_dim).to(cfg.device)
    algorithm = make_algorithm(cfg, head, env)
    runner = OnPolicyRunner(env, algorithm, total_steps=cfg.learner.rollout_steps * cfg.env.num_envs)
    return cfg, env, algorithm, runner


def main() -> None:
    torch.set_num_threads(1)
    cfg, env, algorithm, runner = build(SB3_DEFAULTS)
    runner.run()  # warm-up iteration: compiles the step
    samples = cfg.learner.rollout_steps * cfg.env.num_envs
    steps_per_update = cfg.learner.epochs * (samples // cfg.learner.minibatch_size)

    start = time.perf_counter()
    runner.collect()
    collect_s = time.perf_counter() - start
    start = time.perf_counter()
    algorithm.update()
    update_s = time.perf_counter() - start

    runner.collect()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        algorithm.update()
    events = profiler.key_averages()
    by_name = {event.key: event for event in events}
    total_profiled_us = sum(event.self_cpu_time_total for event in events)

    def total_us(*names: str) -> float:
        return sum(by_name[name].cpu_time_total for name in names if name in by_name)

    graph_us = total_us("CompiledFunction", "Torch-Compiled Region: 0/0", "## Call CompiledFxGraph")
    compiled_region = max((event for event in events if event.key.startswith("Torch-Compiled Region")),
                          key=lambda event: event.cpu_time_total, default=None)
    region_us = compiled_region.cpu_time_total if compiled_region is not None else graph_us
    inductor = max((event for event in events if "CompiledFxGraph" in event.key or event.key == "CompiledFunction"),
                   key=lambda event: event.cpu_time_total, default=None)
    kernel_us = inductor.cpu_time_total if inductor is not None else float("nan")
    gather_us = total_us("aten::index")
    top = sorted(events, key=lambda event: event.self_cpu_time_total, reverse=True)[:15]

    per_step_ms = update_s / steps_per_update * 1e3
    rows = {
        "update, ms per minibatch step": per_step_ms,
        "compiled region (dynamo guards + graph), ms per step": region_us / steps_per_update / 1e3,
        "inductor graph alone (forward, backward, clip, Adam), ms per step": kernel_us / steps_per_update / 1e3,
        "minibatch gather (aten::index), ms per step": gather_us / steps_per_update / 1e3,
        "collection, ms per env step (8 envs)": collect_s / (samples / cfg.env.num_envs) * 1e3,
        "collection, s per rollout": collect_s,
        "update, s per rollout": update_s,
    }
    print(f"\nPPO at SB3's defaults (compiled), {steps_per_update} minibatch steps of {cfg.learner.minibatch_size}"
          f" per update, {samples} samples per rollout, 1 torch thread\n")
    print("| what | value |\n|---|---|")
    for name, value in rows.items():
        print(f"| {name} | {value:.3f} |")
    print("\ntop operators by self CPU time in one update:")
    print("| operator | self ms | calls |\n|---|---|---|")
    for event in top:
        print(f"| {event.key} | {event.self_cpu_time_total / 1e3:.1f} | {event.count} |")
    out = {"benchmark": "ppo_step_profile", "settings": SB3_DEFAULTS, "date": date_stamp(),
           "torch": machine()["torch"], "rows": rows, "profiled_self_cpu_ms": total_profiled_us / 1e3,
           "top_ops": [{"op": e.key, "self_ms": e.self_cpu_time_total / 1e3, "calls": e.count} for e in top]}
    path = write_results("ppo_step_profile.json", out)
    print(f"\nwrote {path}")
    env.close()


if __name__ == "__main__":
    main()

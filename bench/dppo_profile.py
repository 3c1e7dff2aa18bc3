"""Where DPPO's time goes: the denoising chain at collection (``head.sample``) and in the update
(``chain_log_probs`` forward and backward of one minibatch), profiled with torch.profiler.

The head is ``+experiment=dppo_hopper``'s (Hopper-v5, denoiser 3 x 256 Mish, chunks of 4 actions),
with DDPM (20 sampling steps, the last 10 fine-tuned) and with ``policy=diffusion_ddim`` (5 DDIM steps,
all fine-tuned). For each: milliseconds per ``sample`` call for 16 envs, eager and compiled
(``pipeline.compile_sampling``); milliseconds per minibatch of 256 samples for the ratio's forward and
backward (what the update repeats epochs x minibatches times); and the operators that take the most
self CPU time in each, as a share of the total. Writes ``bench/results/dppo_profile.json``.

    python bench/dppo_profile.py
"""

from __future__ import annotations

import json
import os
import time

import torch
from torch.profiler import ProfilerActivity, profile

from common import date_stamp, write_results

HEADS = {"ddpm K=20 K'=10": [], "ddim 5 K'=5": ["policy=diffusion_ddim", "policy.hidden_sizes=[256,256,256]"]}


def timed(fn, repeats: int) -> float:
    """Milliseconds per call of ``fn`` (after two warm-up calls)."""
    fn(), fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e3


def top_operators(fn, repeats: int, rows: int = 8) -> dict[str, float]:
    """Share of self CPU time of the ``rows`` costliest operators over ``repeats`` calls of ``fn``."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            fn()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    return {e.key: round(e.self_cpu_time_total / total, 3) for e in events[:rows]}


def main() -> None:
    from genpol.api import compose_config
    from genpol.build import make_head
    from genpol.configure import validate

    torch.set_num_threads(1)
    out = {"benchmark": "dppo_profile", "date": date_stamp(), "load_average_1min": os.getloadavg()[0],
           "envs": 16, "minibatch": 256, "heads": {}}
    for name, overrides in HEADS.items():
        cfg = validate(compose_config(["run_dir=/tmp/unused", "+experiment=dppo_hopper", "dataset.path=unused.hdf5",
                                       *overrides]))
        torch.manual_seed(0)
        head = make_head(cfg.policy, 11, 3 * cfg.policy.act_steps)  # Hopper-v5: 11 observations, 3 actions
        obs, batch_obs = torch.randn(16, 11), torch.randn(256, 11)
        compiled = torch.compile(head.sample, dynamic=False)
        with torch.no_grad():
            _, record = head.sample(batch_obs)
            eager_ms = timed(lambda: head.sample(obs), 40)
            compiled_ms = timed(lambda: compiled(obs), 40)
            sample_ops = top_operators(lambda: head.sample(obs), 10)

        def ratio_step() -> None:
            head.zero_grad(set_to_none=True)
            head.log_ratio(batch_obs, record).log_ratio.mean().backward()

        row = {"network_calls_per_sample": head.num_steps + 1, "fine_tuned_steps": head.ft_steps,
               "sample_ms_eager": eager_ms, "sample_ms_compiled": compiled_ms, "sample_top_ops": sample_ops,
               "ratio_forward_backward_ms": timed(ratio_step, 10), "ratio_top_ops": top_operators(ratio_step, 5)}
        out["heads"][name] = row
        print(name, json.dumps(row, indent=2), flush=True)
    write_results("dppo_profile.json", out)


if __name__ == "__main__":
    main()

"""Where FPO's update and sampling time goes, against Gaussian PPO's, with the same 256-256 SiLU critic.

One compiled minibatch step (``MinibatchUpdater(compile=True)``, 512 samples; FPO evaluates its velocity
net on 8 (t, noise) pairs per sample) is profiled with torch.profiler and its self time split into
GEMMs (ATen mm/addmm), inductor's fused kernels and wrapper ("compiled graph"), copies, dynamo's guard
check and the rest; then the compiled ``sample`` on 32 envs is timed, and FPO's Euler integration alone.
One torch thread; best of 15 repeats for the timings. Writes ``bench/results/fpo_profile.json``.

    python bench/fpo_profile.py
"""

from __future__ import annotations

import time

import torch
from torch.profiler import profile

from genpol.heads.fpo import FPOHead
from genpol.heads.gaussian import GaussianHead
from genpol.nets import ValueNetwork
from genpol.updaters.losses import PPOClipLoss
from genpol.updaters.minibatch import MinibatchUpdater

from common import date_stamp, write_results

OBS_DIM, ACT_DIM, BATCH, ENVS = 17, 6, 512, 32  # HalfCheetah-v5's sizes, flow_throughput.py's loop


def best_ms(fn, calls: int = 20, repeats: int = 15) -> float:
    for _ in range(5):
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e3)
    return best


def category(name: str) -> str:
    if name in ("aten::mm", "aten::addmm"):
        return "gemm"
    if name == "aten::copy_":
        return "copy"
    if "CompiledFxGraph" in name:
        return "compiled graph"
    if "Cache Lookup" in name:
        return "guards"
    return "other"


def minibatch_step(head: torch.nn.Module) -> dict:
    torch.manual_seed(0)
    critic = ValueNetwork(OBS_DIM, (256, 256), "silu", True)
    updater = MinibatchUpdater(head, critic, PPOClipLoss(clip_range=0.05), lr=1e-4, epochs=1,
                               minibatch_size=BATCH, compile=True)
    obs = torch.randn(BATCH, OBS_DIM)
    with torch.no_grad():
        _, record = head.sample(obs)
    batch = (obs, record, torch.randn(BATCH), torch.randn(BATCH), torch.randn(BATCH))
    step_ms = best_ms(lambda: updater.compiled_step(*batch))
    with profile() as prof:
        for _ in range(20):
            updater.compiled_step(*batch)
    split: dict[str, float] = {}
    for event in prof.key_averages():
        key = category(event.key)
        split[key] = split.get(key, 0.0) + event.self_cpu_time_total / 20 / 1e3
    return {"step_ms": step_ms, "profiled_self_ms": {k: round(v, 3) for k, v in sorted(split.items())}}


def sampling(head: torch.nn.Module) -> dict:
    obs = torch.randn(ENVS, OBS_DIM)
    out = {}
    compiled = torch.compile(head.sample, dynamic=False)
    with torch.no_grad():
        out["compiled_sample_ms"] = best_ms(lambda: compiled(obs))
        if isinstance(head, FPOHead):
            generate = torch.compile(lambda o: head.generate(o, torch.randn(o.shape[0], ACT_DIM)), dynamic=False)
            out["compiled_integration_only_ms"] = best_ms(lambda: generate(obs))
    return out


def main() -> None:
    torch.set_num_threads(1)
    torch._dynamo.config.recompile_limit = 64
    rows = {}
    for name, head in (("gaussian", GaussianHead(OBS_DIM, ACT_DIM, hidden_sizes=(64, 64), activation="tanh")), ("fpo", FPOHead(OBS_DIM, ACT_DIM))):
        rows[name] = {**minibatch_step(head), **sampling(head)}
        print(f"{name:9s} step {rows[name]['step_ms']:.2f} ms  {rows[name]['profiled_self_ms']}  "
              f"sample {rows[name]['compiled_sample_ms']:.3f} ms", flush=True)
    print(f"fpo integration alone {rows['fpo']['compiled_integration_only_ms']:.3f} ms; "
          f"step ratio fpo / gaussian {rows['fpo']['step_ms'] / rows['gaussian']['step_ms']:.2f}")
    out = {"benchmark": "fpo_profile", "date": date_stamp(), "batch": BATCH, "envs": ENVS, "rows": rows}
    path = write_results("fpo_profile.json", out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

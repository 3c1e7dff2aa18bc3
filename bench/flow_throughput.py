"""Training throughput of the flow heads against Gaussian PPO on HalfCheetah-v5, side by side.

Every row runs the same loop: 32 envs x 64-step rollouts, minibatches of 512, 10 epochs, compiled
update and compiled sampling (``pipeline.compile_sampling``), and the same critic (256-256 SiLU, the
flow heads' default), so that the rows differ only in the policy head:

* Gaussian: one MLP call per action; the ratio is one log-density;
* FPO: 10 Euler steps per action, plus N_mc = 8 flow-matching losses per action at sampling time and
  8 per sample in every minibatch (``ratio_mode`` average; FPO++'s per-sample mode costs the same);
* PolicyFlow: 10 midpoint steps (20 network calls) per action; one velocity change per sample in the
  minibatch, plus the snapshot's forward;
* DPPO, from scratch, as ``policy=diffusion_ddim`` (DDIM in 5 steps, all fine-tuned, so no pretraining
  is needed): 6 network calls per sample (5 steps and the record's batched log-probs) and 5 denoising
  steps per sample in every minibatch. ``dppo-ddim5-256`` is ``+experiment=dppo_hopper``'s denoiser
  (3 x 256 Mish) with DPPO's chunks of 4 actions (one sample per 4 env steps, so a rollout of 64 is
  256 env steps per env); ``dppo-ddim5-64`` the same with a denoiser of the flow heads' size (3 x 64
  Mish); ``dppo-ddim5-64-h1`` samples every env step (horizon 1), the harder case.
  The DDPM heads (20 steps) cannot train from scratch unless all 20 are fine-tuned; their
  throughput is measured in DPPO's offline-to-online loop by ``bench/dppo_throughput.py``.
* consistency: its stochastic 2-step sampler (2 network calls per action) with exact per-step Gaussian
  log-probs, so 2 ratio units per sample; ``consistency`` is the head's own 3 x 256 Mish network,
  ``consistency-64`` the same at 3 x 64;
* GoRL (``policy=gorl``, stage 0 as ``pipeline=online`` runs it): a 4 x 32 Gaussian encoder in latent
  space, whose ratio is the update's, and a 4 x 64 flow decoder integrated in 10 Euler steps per action
  at collection time (zero-initialized: the identity, but every step is computed).

The machine's speed drifts by up to 2x over a minute, so the heads run in interleaved rounds
(Gaussian, FPO, PolicyFlow, DPPO, Gaussian, ...) and each generative head is quoted as the median over rounds of
its rate divided by the mean of the two Gaussian rates measured around it. ``gaussian (ppo_fast)``
is genpol's fast Gaussian configuration with its own 64-64 tanh critic, for reference.
Writes ``bench/results/flow_throughput.json``.

    python bench/flow_throughput.py [--iterations 3] [--rounds 3] [--heads fpo policyflow dppo-ddim5-64 ...]
        [--overrides update_threads=2 --out flow_throughput_threads.json]
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch

from common import date_stamp, write_results

LOOP = ["env=halfcheetah", "env.num_envs=32", "learner.rollout_steps=64", "learner.minibatch_size=512",
        "learner.epochs=10", "learner.compile=true", "pipeline.compile_sampling=true"]
SAME_CRITIC = ["policy.critic_hidden_sizes=[256,256]", "policy.critic_activation=silu"]
ROWS = {
    "gaussian": [*LOOP, "policy=gaussian", *SAME_CRITIC],
    "fpo": [*LOOP, "policy=fpo", *SAME_CRITIC],  # FPO's default critic already is this one
    "policyflow": [*LOOP, "policy=policyflow", *SAME_CRITIC],  # PolicyFlow's default uses ELU
    "dppo-ddim5-256": [*LOOP, "policy=diffusion_ddim", "policy.hidden_sizes=[256,256,256]", *SAME_CRITIC],
    "dppo-ddim5-64": [*LOOP, "policy=diffusion_ddim", "policy.hidden_sizes=[64,64,64]", *SAME_CRITIC],
    "dppo-ddim5-64-h1": [*LOOP, "policy=diffusion_ddim", "policy.hidden_sizes=[64,64,64]", "policy.act_steps=1",
                         "policy.horizon_steps=1", *SAME_CRITIC],
    "consistency": [*LOOP, "policy=consistency", *SAME_CRITIC],
    "consistency-64": [*LOOP, "policy=consistency", "policy.hidden_sizes=[64,64,64]", *SAME_CRITIC],
    "gorl": [*LOOP, "policy=gorl", *SAME_CRITIC],
    "gaussian (ppo_fast)": ["+experiment=ppo_fast", "env=halfcheetah"],
}
HEADS = ["fpo", "policyflow", "dppo-ddim5-256", "dppo-ddim5-64", "dppo-ddim5-64-h1", "consistency", "consistency-64",
         "gorl"]


def main() -> None:
    from throughput import genpol_run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=3, help="timed rollouts per row")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--heads", nargs="*", default=HEADS, choices=HEADS)
    parser.add_argument("--overrides", nargs="*", default=[], help="appended to every row, e.g. update_threads=2")
    parser.add_argument("--out", default="flow_throughput.json", help="results file name in bench/results/")
    args = parser.parse_args()
    torch.set_num_threads(1)
    # every row builds its own compiled step and sampler: more than dynamo's default 8 per code object
    torch._dynamo.config.recompile_limit = 64

    def measure(name: str) -> dict:
        sps, detail = genpol_run([*ROWS[name], *args.overrides], args.iterations)
        print(f"{name:24s} {sps:8.0f} env-steps/s  (collect {detail['collect_s']:.2f} s, "
              f"update {detail['update_s']:.2f} s)", flush=True)
        return {"sps": sps, **detail}

    rounds: list[dict[str, dict]] = []
    gaussian_before = measure("gaussian")
    for _ in range(args.rounds):
        row = {"gaussian_before": gaussian_before, **{name: measure(name) for name in args.heads}}
        row["gaussian_after"] = gaussian_before = measure("gaussian")
        adjacent = (row["gaussian_before"]["sps"] + row["gaussian_after"]["sps"]) / 2
        for name in args.heads:
            row[name]["fraction_of_gaussian"] = row[name]["sps"] / adjacent
        row["load_average_1min"] = os.getloadavg()[0]
        rounds.append(row)
    summary = {name: statistics.median(r[name]["fraction_of_gaussian"] for r in rounds) for name in args.heads}
    reference = measure("gaussian (ppo_fast)")
    for name, fraction in summary.items():
        print(f"{name:24s} {fraction:.2f} of Gaussian PPO (median over {args.rounds} rounds; same loop and critic)")
    out = {"benchmark": "flow_throughput", "env": "HalfCheetah-v5", "iterations": args.iterations,
           "loop": LOOP, "overrides": args.overrides, "date": date_stamp(),
           "fraction_of_gaussian": summary, "rounds": rounds, "gaussian_ppo_fast": reference}
    path = write_results(args.out, out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

"""DPPO's training throughput against Gaussian PPO in the same loop with the same critic, per option.

The loop is ``+experiment=dppo_hopper``'s: Hopper-v5, 16 envs x 64 rollout steps, minibatches of 256,
5 epochs, the critic Mish 256 x 3, no observation normalization. Rows differ only in the policy head
and in what is compiled:

* ``gaussian``: the diagonal Gaussian head (64-64 tanh), one action per env step;
* ``dppo ddpm K=20 K'=10``: the experiment's head (denoiser 3 x 256 Mish, chunks of 4 actions, DDPM 20
  steps of which the last 10 are fine-tuned), compiled sampling, eager update (bench/results/dppo.json's row);
* ``... compiled update``: the same with ``learner.compile=true`` (the whole minibatch step one graph);
* ``dppo ddpm K=20 K'=5``: DDPM sampling as above, only the last 5 steps fine-tuned (half the update);
* ``dppo ddim 5 K'=5``: DDIM in 5 steps, all 5 fine-tuned (DPPO's Furniture setting; ``policy=diffusion_ddim``);
* ``dppo ddim 5 K'=5, eager update``;
* ``..., 2 update threads``: the Gaussian and DPPO Gym rows with ``update_threads=2`` (acting on one thread);
* ``..., torch layers``: the Gaussian and DPPO Gym rows built with torch's ``nn.Mish`` and ``nn.Linear``
  in ``genpol.nets`` instead of its ``Mish`` and ``OneDNNLinear`` (the layers before 2026-12-01).

Two more Gaussian rows keep the Gaussian's own critic (64-64 tanh, the comparison of
bench/results/dppo.json, where DPPO measured 0.51): each DPPO row is quoted against them as well
(``fraction_of_gaussian_own_critic``), a harder reference than the issue's "same critic".

Each Gaussian row runs in the same update mode as the DPPO rows it is compared with: the eager DPPO row
against the eager Gaussian, the compiled ones against the compiled Gaussian. Every row is built and
warmed up (compiled) once; then the rows run ``--iterations`` timed rollout + update iterations each,
in ``--rounds`` interleaved rounds (the machine's speed drifts and it is shared), and a DPPO row's
fraction is the median over rounds of its rate divided by the mean of its Gaussian row's rates in the
rounds around it. The load average (1 min) is recorded with each round.
Writes ``bench/results/dppo_throughput.json``.

    python bench/dppo_throughput.py [--iterations 2] [--rounds 3] [--rows ...] [--out dppo_throughput.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from common import date_stamp, write_results

DATASET = "unused.hdf5"  # the experiment asks for a dataset; throughput skips BC and never reads it

LOOP = ["env=hopper", "env.num_envs=16", "env.normalize_obs=false", "learner.rollout_steps=64",
        "learner.minibatch_size=256", "learner.epochs=5", "policy.critic_hidden_sizes=[256,256,256]",
        "policy.critic_activation=mish"]
DPPO = ["+experiment=dppo_hopper", f"dataset.path={DATASET}", "pipeline.compile_sampling=true"]
DDIM = [*DPPO, "policy=diffusion_ddim", "policy.hidden_sizes=[256,256,256]"]
OWN_CRITIC = ["policy.critic_hidden_sizes=[64,64]", "policy.critic_activation=tanh"]  # the Gaussian's default
ROWS = {  # name -> (overrides, the Gaussian row it is compared with)
    "gaussian": ([*LOOP, "policy=gaussian"], None),
    "gaussian, compiled update": ([*LOOP, "policy=gaussian", "learner.compile=true"], None),
    "gaussian, own critic": ([*LOOP, "policy=gaussian", *OWN_CRITIC], None),
    "gaussian, own critic, compiled update": ([*LOOP, "policy=gaussian", *OWN_CRITIC, "learner.compile=true"], None),
    "dppo ddpm K=20 K'=10": ([*DPPO, *LOOP], "gaussian"),
    "dppo ddpm K=20 K'=10, compiled update": ([*DPPO, *LOOP, "learner.compile=true"], "gaussian, compiled update"),
    "dppo ddpm K=20 K'=5": ([*DPPO, *LOOP, "policy.ft_denoising_steps=5"], "gaussian"),
    "dppo ddim 5 K'=5": ([*DDIM, *LOOP], "gaussian"),
    "dppo ddim 5 K'=5, compiled update": ([*DDIM, *LOOP, "learner.compile=true"], "gaussian, compiled update"),
    # both loops with the update on two torch threads (update_threads=2; acting stays on one): the second
    # core idles during the update of this one-process loop
    "gaussian, 2 update threads": ([*LOOP, "policy=gaussian", "update_threads=2"], None),
    "dppo ddpm K=20 K'=10, 2 update threads": ([*DPPO, *LOOP, "update_threads=2"], "gaussian, 2 update threads"),
    # the layers before 2026-12-01: the same two loops built with torch's nn.Mish and nn.Linear
    "gaussian, torch layers": ([*LOOP, "policy=gaussian"], None),
    "dppo ddpm K=20 K'=10, torch layers": ([*DPPO, *LOOP], "gaussian, torch layers"),
}


class Row:
    """One training loop, built and warmed up once; ``time(iterations)`` -> env-steps/s and its split."""

    def __init__(self, overrides: list[str], torch_layers: bool = False):
        from genpol.algorithms import make_algorithm
        from genpol.api import compose_config
        from genpol.build import env_stack, make_env, make_head
        from genpol.configure import validate
        from genpol.runners.onpolicy import OnPolicyRunner

        from genpol import nets

        cfg = validate(compose_config(["run_dir=/tmp/unused", *overrides]))
        torch.manual_seed(0)
        self.env = make_env(cfg.env, gamma=cfg.learner.gamma, seed=0, device=cfg.device, stack=env_stack(cfg.policy))
        mish, linear = nets.ACTIVATIONS["mish"], nets.OneDNNLinear
        if torch_layers:
            nets.ACTIVATIONS["mish"], nets.OneDNNLinear = torch.nn.Mish, torch.nn.Linear
        try:
            head = make_head(cfg.policy, self.env.obs_dim, self.env.act_dim).to(cfg.device)
            self.algorithm = make_algorithm(cfg, head, self.env)
        finally:
            nets.ACTIVATIONS["mish"], nets.OneDNNLinear = mish, linear
        self.runner = OnPolicyRunner(self.env, self.algorithm, total_steps=cfg.learner.rollout_steps * cfg.env.num_envs,
                                     update_threads=cfg.update_threads)
        start = time.perf_counter()
        self.runner.run()  # warm-up iteration: compiles what is compiled
        self.time(1)  # and one more, so that no first-call work lands in a timed round
        self.warmup_s = time.perf_counter() - start

    def time(self, iterations: int) -> dict:
        collect = update = 0.0
        steps = 0
        for _ in range(iterations):
            start = time.perf_counter()
            steps += self.runner.collect()
            middle = time.perf_counter()
            self.runner.update()  # on the row's update_threads
            collect += middle - start
            update += time.perf_counter() - middle
        return {"sps": steps / (collect + update), "collect_s": collect, "update_s": update, "steps": steps,
                "collect_only_sps": steps / collect}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2, help="timed rollouts per row and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", nargs="*", default=list(ROWS), help="a subset of the rows (with their Gaussians)")
    parser.add_argument("--out", default="dppo_throughput.json", help="results file name in bench/results/")
    args = parser.parse_args()
    torch.set_num_threads(1)
    # every row builds its own compiled step and sampler: more than dynamo's default 8 per code object
    torch._dynamo.config.recompile_limit = 64
    wanted = set(args.rows) | {ROWS[r][1] for r in args.rows if ROWS[r][1]}
    wanted |= {n.replace("gaussian", "gaussian, own critic") for n in wanted if n.startswith("gaussian")}
    names = [n for n in ROWS if n in wanted]

    rows = {}
    for name in names:
        rows[name] = Row(ROWS[name][0], torch_layers=name.endswith("torch layers"))
        print(f"built {name:42s} warm-up {rows[name].warmup_s:6.1f} s", flush=True)
    for row in rows.values():  # once more after all are built: building a later row made the first
        row.time(1)  # timed iteration of a compiled one recompile (1245 env-steps/s against ~6100)
    rounds: list[dict] = []
    gaussians = [n for n in names if ROWS[n][1] is None]
    measured = {n: rows[n].time(args.iterations) for n in gaussians}  # the first "before"
    for _ in range(args.rounds):
        record = {"load_average_1min": os.getloadavg()[0], "before": measured}
        for name in names:
            if ROWS[name][1] is not None:
                record[name] = rows[name].time(args.iterations)
        measured = {n: rows[n].time(args.iterations) for n in gaussians}
        record["after"] = measured
        for name in names:
            reference = ROWS[name][1]
            if reference is not None:
                adjacent = (record["before"][reference]["sps"] + record["after"][reference]["sps"]) / 2
                record[name]["fraction_of_gaussian"] = record[name]["sps"] / adjacent
                own = reference.replace("gaussian", "gaussian, own critic")
                if own in record["before"]:
                    own_adjacent = (record["before"][own]["sps"] + record["after"][own]["sps"]) / 2
                    record[name]["fraction_of_gaussian_own_critic"] = record[name]["sps"] / own_adjacent
                print(f"{name:42s} {record[name]['sps']:7.0f} env-steps/s (collect {record[name]['collect_s']:.2f} s, "
                      f"update {record[name]['update_s']:.2f} s) = {record[name]['fraction_of_gaussian']:.2f} "
                      f"of '{reference}' ({adjacent:.0f})", flush=True)
        rounds.append(record)
    dppo_rows = [name for name in names if ROWS[name][1] is not None]
    summary = {name: statistics.median(r[name]["fraction_of_gaussian"] for r in rounds) for name in dppo_rows}
    own_critic = {name: statistics.median(r[name]["fraction_of_gaussian_own_critic"] for r in rounds)
                  for name in dppo_rows if "fraction_of_gaussian_own_critic" in rounds[0][name]}
    for name, fraction in summary.items():
        print(f"{name:42s} {fraction:.2f} of Gaussian PPO, same critic; {own_critic.get(name, float('nan')):.2f} "
              f"of Gaussian with its own critic (medians of {args.rounds} rounds)")
    out = {"benchmark": "dppo_throughput", "env": "Hopper-v5", "loop": LOOP, "iterations": args.iterations,
           "date": date_stamp(), "rows": {n: ROWS[n][0] for n in names},
           "compared_with": {n: ROWS[n][1] for n in names if ROWS[n][1]},
           "warmup_s": {n: rows[n].warmup_s for n in names}, "fraction_of_gaussian": summary,
           "fraction_of_gaussian_own_critic": own_critic, "rounds": rounds}
    path = write_results(args.out, out)
    print(f"wrote {path}")
    for row in rows.values():
        row.env.close()


if __name__ == "__main__":
    main()

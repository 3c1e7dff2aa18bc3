"""Learning parity at equal budget: the authors' (or the field's reference) training code against
genpol at the same hyperparameters, the same task and the same env steps, several seeds per side.

Pairs (``--pairs``; the reference side runs from a snapshot outside genpol's tree, ``--ref-*``):

* ``ppo``  CleanRL's ``ppo_continuous_action.py`` (its defaults: 1 env x 2048 steps, 32 minibatches,
  10 epochs, lr 3e-4 annealed, clip 0.2 with value clipping, 64-64 tanh, observation and reward
  normalization) against ``learner=ppo`` set to the same;
* ``spo``  SPO's official ``mujoco/main.py`` (``main(env, seed, "spo")``: 8 envs x 256 steps, 4
  minibatches, 10 epochs, lr 3e-4 annealed, epsilon 0.2, Adam epsilon 1e-8, the 7-layer
  256-256-128-128-64-64 tanh policy) against ``learner=spo`` set to the same;
* ``ppo_spo`` SPO's ``main.py`` run as ``main(env, seed, "ppo")``: its PPO-clip at the same settings,
  against ``learner=ppo`` set to them; with ``spo`` it is the SPO paper's claim (SPO above PPO) on
  each codebase;
* ``spo_terminate``, ``ppo_spo_terminate``: genpol's side of ``spo`` and ``ppo_spo`` with
  ``learner.bootstrap_truncation=false`` (the authors' code ends a return at a time limit as at a
  termination; genpol bootstraps it), against the same reference runs;
* ``trpo`` sb3-contrib's TRPO against ``learner=trpo`` (``bench/trpo_vs_sb3.py``'s settings); ``trpo_mean_kl``:
  genpol's side with ``learner.kl_reduction=mean`` (sb3-contrib's KL, averaged over action dimensions),
  against the same reference runs;
* ``sac``  CleanRL's ``sac_continuous_action.py`` (its defaults: 256-256 ReLU actor and twin critics,
  batch 256, actor lr 3e-4, critic and temperature lr 1e-3, 60k steps, two actor steps every second env step,
  learned temperature from 1, log-std squashed into [-5, 2] by tanh, 5000 random steps) against
  ``learner=sac`` with ``batching=cleanrl`` and the same (``tests/test_sac_cleanrl.py`` checks the
  update against CleanRL's loop body written out); its rollout, for the metric, is genpol's logging
  iteration of 1000 env steps;
* ``rlpd`` the authors' RLPD learner (ikostrikov/rlpd's ``SACLearner``, JAX, ``--jax-python``) in their
  ``train_finetuning.py``'s loop written out (``bench/run_reference_rlpd.py``: their script needs D4RL's
  servers and gym 0.2x) against ``+experiment=rlpd``, both at the CPU-sized setting of
  ``bench/learning.py``'s rlpd suite (10 LayerNorm critics of 256 x 2, subset-min 2, UTD 2, batch 128,
  half of every batch from ``--dataset``, 5000 random steps), 50k steps; the dataset is genpol's
  locally made Hopper "medium" file (``bench/make_hopper_medium.sh``);
* ``expo`` the authors' EXPO learner (Servo97/EXPO's ``EXPOLearner``, JAX, ``--jax-python``) in their
  ``train_finetuning.py``'s loop written out (``bench/run_reference_expo.py``: their script needs D4RL's
  servers, mujoco-py and gym 0.2x) against ``+experiment=expo`` on their base network
  (``policy=diffusion_expo_authors learner.base_weight_decay=1e-4``), both at the CPU-sized setting of
  genpol's EXPO-vs-RLPD claim runs (``bench/results/expo_learning.json``: 2 LayerNorm critics of 256 x 2,
  subset-min 2, UTD 1, batch 128, 4 base samples all edited, half of every batch from ``--dataset``, 2000
  random steps; ``EXPO_CPU``), their ``adjust_target_entropy`` flag set as genpol's default is, and time limits
  stored as terminations on both sides (their loop's ``mask = 1 - done``; ``learner.bootstrap_truncation=false``),
  20k steps (``EXPO_STEPS``); the edit policy is 256 x 2 on both (their ``hidden_dims`` sizes it and the
  critics alike);
* ``dppo`` the authors' ``PPODiffusion`` (irom-lab/dppo) in their ``TrainPPODiffusionAgent.run`` loop written
  out (``bench/run_reference_dppo.py``: their script needs Hydra and D4RL's gym 0.2x) against
  ``+experiment=dppo_hopper`` with DPPO's network (``DPPO_THEIR_NETWORK``), Adam epsilon 1e-8 and no
  gradient clip (their Gym configs set none), 500k steps. Both fine-tune the same policy: genpol's side
  pretrains on ``--dataset`` (the bundle's 20k BC steps, seed by seed) and the reference side loads that
  run's pretraining checkpoint into their model (so it waits for it, and genpol's side runs first);
* ``consistency_ac`` Ding & Jin's online Consistency-AC (their ``online.py`` loop written out around their
  ``OnlineAgent``, ``bench/run_reference_consistency_ac.py``: their script needs gym 0.23) against
  ``learner=consistency_ac`` from scratch with their settings (``CONSISTENCY_AC_THEIR_ONLINE``: 3 envs, one
  gradient step per 12 transitions, lr 1e-5, time limits as terminations), 150k steps (their runs: 3M);
* ``consistency_ac_offline`` Ding & Jin's offline Consistency-AC (their ``offline.py`` ``train_agent`` and
  ``Consistency_QL``, run unmodified by ``bench/run_reference_consistency_ac_offline.py`` on ``--dataset`` as
  ``d4rl.qlearning_dataset`` builds it) against genpol's offline phase of ``+experiment=consistency_ac`` with
  their hopper-medium-v2 row (``CONSISTENCY_AC_THEIR_OFFLINE``: eta 0.1, T 2, lr 3e-4, clip 9), 20k gradient
  steps (their runs: 2M) in one of their ``train`` calls. The metric of this pair is the final evaluation's
  mean return (10 episodes of softmax-Q acting, as their ``eval_policy``), its time per gradient step;
* ``consistency_ac_offline_raw``: genpol's side of ``consistency_ac_offline`` with their raw observations
  (``dataset.observations=raw``; that pair's genpol side sees them min-max scaled to [-1, 1]), against its
  reference runs;
* ``consistency_ac_o2o`` Ding & Jin's offline then online Consistency-AC as their ``scripts/offline2online.slurm``
  chains it (``bench/run_reference_consistency_ac_o2o.py``: the offline pair's harness saving their model, then
  the online pair's loading it with their ``OnlineAgent.load_model``, ``--load_id offline``) against ONE
  ``+experiment=consistency_ac`` run (offline phase, then online in the same process): 20k offline gradient steps
  (``CONSISTENCY_AC_OFFLINE_STEPS``), then ``CONSISTENCY_AC_O2O_STEPS`` (150k) online env steps (their runs: 2M
  and 3M), 3 envs, one gradient step per 12 transitions, epsilon 1 to 0.01 over the first 10 % of the online
  phase, no offline data online (``learner.offline_ratio=0``: their online replay starts empty). genpol's
  options: ``consistency_ac_o2o_options`` (every ``CONSISTENCY_AC_THEIR_OFFLINE`` option, the online-only
  ones of ``CONSISTENCY_AC_THEIR_ONLINE``, and at the switch the ones their online phase sets otherwise,
  ``CONSISTENCY_AC_O2O_ONLINE_CHANGES`` through ``pipeline.online_learner`` / ``online_policy``: eta 1, no BC,
  actor lr 1e-5, 5 sampling steps). Their ``load_model`` loads only the actor and critic state dicts into a
  new ``OnlineAgent``, whose constructor had copied the critic target and the EMA actor from its freshly
  initialized networks: online their TD targets (and the softmax-Q acting, which uses the target critics)
  start from random target critics, Polyak-averaged (tau 0.005 per gradient step) towards the loaded ones,
  and next actions from a random EMA actor, held until their online gradient step 1000 (12k env steps) and
  averaged from there; their Adam moments and step count start at 0. genpol's side does the same with
  ``pipeline.online_reset=[optimizers,targets,step_counts]`` (other random draws of the same
  initialization). The online budget is the consistency_ac pair's, so each codebase's start from the offline
  model compares with its start from scratch at equal online steps, and it outlasts that reload transient
  (the EMA actor keeps 5 % of its random weights until ~48k); at 50k the last tenth would sit at the
  transient's end. Metric: the online phase's training return, as ``consistency_ac`` (every episode of the
  last 15k env steps, epsilon 0.01 on both sides, rather than 10 evaluation episodes; the final evaluation
  and the offline phase's are kept beside it; the time is per online env step, the offline phase's per
  gradient step beside it). What differs:
  - observations: none; genpol's side takes their raw observations (``dataset.observations=raw``); its
    actions are still mapped by the dataset's range, the identity on this data, whose actions span [-1, 1];
  - the offline phase is the consistency_ac_offline pair's on both sides (the same harness and options, so the
    same differences); their model selection (``ms offline``, ``top_k``) has one evaluation to choose from here
    and keeps the model after the last step, as genpol's run does;
  - as the consistency_ac pair: gymnasium Hopper-v5 for D4RL's hopper-medium-v2, seeding, one epsilon draw
    per vector step on their side against one per env on genpol's.

The reference scripts run unmodified through ``bench/run_reference.py`` (gymnasium 0.29's vector API
on gymnasium 1.x); every side runs on one torch thread, one run at a time, so the times per env step
compare.

**The metric** is the same on both sides: the undiscounted returns of the training episodes, averaged
per rollout of the pair's length (the episodes that ended during it: what genpol logs as
``charts/episodic_return``), then over the rollouts in the last 10 % of the budget. It needs nothing
but episode returns, which every script reports; genpol's deterministic final evaluation is recorded
beside it.

**The verdict**: per pair, the medians over seeds with ``genpol.report``'s 95 % bootstrap interval,
and the percentile-bootstrap 95 % interval of the difference of medians (genpol - reference; exact,
every resample of both sides, up to 7 seeds a side). Parity holds when that interval contains 0.

Every finished run is stored in ``bench/results/learning_parity.json`` as it ends; a rerun skips the
runs already there, so the script resumes after an interruption (a run cut short starts over).

    python bench/learning_parity.py --pairs ppo spo trpo sac --seeds 1 2 3 \\
        --ref-cleanrl /tmp/ref/cleanrl --ref-spo /tmp/ref/Simple-Policy-Optimization

``--sides reference`` and ``--sides genpol`` in two processes run one seed's two sides at once, one per
core (the results file is merged under a lock).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from common import (ROOT, RUNS, cpu_model, cpu_name, date_stamp, read_progress, read_results, read_summary,
                    train_once, update_results)

RESULTS_NAME = "learning_parity.json"
RUN_ROOT = RUNS / "learning_parity"
LAST_FRACTION = 0.1  # the metric averages the rollouts in this final fraction of the budget
GENPOL_COMMON = ["env=hopper", "env.workers=1", "torch_threads=1", "update_threads=1", "pipeline.video=false",
                 "pipeline.eval_episodes=10", "pipeline.eval_every=0", "logger.progress_bar=false"]
# CleanRL's and SPO's loss is 0.5 * c * mean((R - V)^2) with c = 0.5; genpol writes vf_coef * mean(...).
# Adam's epsilon is per pair: CleanRL 1e-5, SPO torch's default 1e-8.
ONPOLICY_COMMON = ["learner.lr=3e-4", "learner.lr_schedule=linear", "learner.epochs=10", "learner.clip_range=0.2",
                   "learner.clip_range_vf=0.2", "learner.vf_coef=0.25", "learner.ent_coef=0", "learner.max_grad_norm=0.5",
                   "learner.grad_clip=joint", "learner.gamma=0.99", "learner.gae_lambda=0.95"]


# genpol's diffusion head built as DPPO's network (bench/parity/dppo.py), so their model loads genpol's pretraining
DPPO_THEIR_NETWORK = ["policy.time_embedding=dppo", "policy.output_activation=false", "policy.time_mlp_activation=mish",
                      "policy.critic_residual=true", "policy.final_clamp=false"]
# Ding & Jin's online.py for Hopper (hopper-medium-v2's row: lr 1e-5, clip 9), genpol's options for their update
# (bench/parity/consistency_ac.py's online row), one gradient step every 4th vector step of 3 envs, time limits
# stored as terminations (their SB3 buffer runs without handle_timeout_termination)
CONSISTENCY_AC_THEIR_ONLINE = [
    "policy.sampling_steps=5", "policy.time_input=ding_jin", "policy.scale_input=false", "policy.clamp_gradient=zero",
    "policy.target_warmup=hold", "learner.bc_coef=0", "learner.eta=1.0", "learner.lr=1e-5", "learner.critic_lr=3e-4",
    "learner.max_grad_norm=9.0", "learner.critic_reduction=sum", "learner.actor_ema_warmup=hold",
    "learner.batch_size=256", "learner.buffer_size=100000", "learner.learning_starts=0",
    "learner.utd=0.08333333333333333", "learner.bootstrap_truncation=false"]
# Ding & Jin's offline.py for hopper-medium-v2 with --model consistency (their table's row: lr 3e-4 for actor and
# critic, eta 0.1, T 2, clip 9; bc 1), genpol's options for their update (bench/parity/consistency_ac.py's offline
# rows), N(k) over the one train call the budget is on their side (run_reference_consistency_ac_offline.py)
CONSISTENCY_AC_OFFLINE_STEPS = 20_000
CONSISTENCY_AC_THEIR_OFFLINE = [
    "policy.sampling_steps=2", "policy.time_input=ding_jin", "policy.scale_input=false", "policy.clamp_gradient=zero",
    "policy.target_warmup=hold", "policy.ct_schedule_repeats=true", "policy.ct_final_scales=149", "learner.bc_coef=1.0",
    "learner.eta=0.1", "learner.lr=3e-4", "learner.critic_lr=3e-4", "learner.max_grad_norm=9.0",
    "learner.critic_reduction=sum", "learner.actor_ema_warmup=hold", "learner.offline_lr_decay=false",
    "pipeline.pretrain_batch_size=256", "pipeline.pretrain_eval_every=0"]


def _option_key(option: str) -> str:
    """The dotted key of a Hydra override (``learner.lr=1e-5`` -> ``learner.lr``)."""
    return option.split("=", 1)[0].lstrip("+~")


# the keys Ding & Jin's offline and online phases set differently (their online values): genpol's run takes them
# at the switch through pipeline.online_learner / online_policy
CONSISTENCY_AC_O2O_ONLINE_CHANGES = [
    option for option in CONSISTENCY_AC_THEIR_ONLINE
    if _option_key(option) in {_option_key(o) for o in CONSISTENCY_AC_THEIR_OFFLINE}
    and option not in CONSISTENCY_AC_THEIR_OFFLINE]


def _online_phase_option(option: str) -> str:
    """``learner.eta=1.0`` -> ``+pipeline.online_learner.eta=1.0`` (``policy.*``: ``online_policy``)."""
    group, _, rest = option.partition(".")
    return f"+pipeline.online_{group}.{rest}"


def consistency_ac_o2o_options(offline_steps: int) -> list[str]:
    """genpol's overrides of the consistency_ac_o2o pair (after ``+experiment=consistency_ac``): their offline
    phase's options (``CONSISTENCY_AC_THEIR_OFFLINE``, N(k) over the ``offline_steps`` of their one ``train``
    call), the options of their online phase that only the online phase reads, those it sets to other values
    than the offline phase (``CONSISTENCY_AC_O2O_ONLINE_CHANGES``, taken at the switch), their reload into a
    new agent (``pipeline.online_reset``), and their online loop's exploration and data: 3 envs, epsilon 1 to
    0.01 over the first 10 % (the experiment's is 0.01 throughout), no offline data in the online batches (the
    experiment's ``offline_ratio`` is 0.5)."""
    offline_keys = {_option_key(option) for option in CONSISTENCY_AC_THEIR_OFFLINE}
    online_only = [option for option in CONSISTENCY_AC_THEIR_ONLINE if _option_key(option) not in offline_keys]
    return [*CONSISTENCY_AC_THEIR_OFFLINE, "dataset.observations=raw", f"pipeline.pretrain_steps={offline_steps}",
            f"policy.ct_total_steps={offline_steps}", "env.num_envs=3", *online_only,
            *map(_online_phase_option, CONSISTENCY_AC_O2O_ONLINE_CHANGES),
            "pipeline.online_reset=[optimizers,targets,step_counts]", "learner.offline_ratio=0",
            "learner.explore_initial=1.0", "learner.explore_final=0.01", "learner.explore_fraction=0.1"]


# the expo pair (issue 28): the CPU-sized setting of genpol's EXPO-vs-RLPD claim runs (bench/results/expo_learning.json,
# its "critic" and "command") on both sides, from this one table: their create's keyword arguments and genpol's
# overrides are both made from it. Their hidden_dims sizes their critics and their edit policy alike.
EXPO_STEPS = 20_000
EXPO_CPU = {"num_qs": 2, "num_min_qs": 2, "hidden": [256, 256], "samples": 4, "utd": 1, "batch_size": 128,
            "learning_starts": 2000}
# the pairs that train on --dataset (the Hopper "medium" file)
DATASET_PAIRS = ("rlpd", "expo", "dppo", "consistency_ac_offline", "consistency_ac_offline_raw", "consistency_ac_o2o")
# the consistency_ac_o2o pair: online env steps after the offline pair's 20k gradient steps (see its entry above)
CONSISTENCY_AC_O2O_STEPS = 150_000
PRETRAINED_WAIT_S = 3600  # the dppo pair's reference side waits this long for genpol's pretraining of its seed


# --------------------------------------------------------------------------- the pairs
def pair_settings(name: str, steps: int | None = None) -> dict[str, Any]:
    """Per pair: the task, the budget, the rollout length the metric averages over, genpol's overrides
    and what the reference side needs. ``steps``: a budget other than the pair's (a trial)."""
    settings = _pair_settings(name)
    if steps is not None:
        settings["steps"] = steps
    if settings.get("offline"):  # the budget is genpol's offline phase, over which N(k) grows once
        settings["genpol"] = [*settings["genpol"], f"pipeline.pretrain_steps={settings['steps']}",
                              f"policy.ct_total_steps={settings['steps']}"]
    return settings


def _pair_settings(name: str) -> dict[str, Any]:
    if name == "ppo":
        return {"env": "Hopper-v5", "steps": 147 * 2048, "rollout": 2048, "reference": "CleanRL ppo_continuous_action.py",
                "genpol": ["policy=gaussian", "learner=ppo", "env.num_envs=1", "learner.rollout_steps=2048",
                           "learner.minibatch_size=64", "learner.adam_eps=1e-5", *ONPOLICY_COMMON]}
    if name == "spo":
        return {"env": "Hopper-v5", "steps": 245 * 2048, "rollout": 2048, "reference": "SPO mujoco/main.py",
                "genpol": ["policy=gaussian", "learner=spo", "env.num_envs=8", "learner.rollout_steps=256",
                           "learner.minibatch_size=512", "policy.hidden_sizes=[256,256,128,128,64,64]",
                           "learner.adam_eps=1e-8", *ONPOLICY_COMMON]}
    if name == "ppo_spo":
        spo = pair_settings("spo")
        return {**spo, "reference": "SPO mujoco/main.py, algo ppo",
                "genpol": [override.replace("learner=spo", "learner=ppo") for override in spo["genpol"]]}
    if name in ("ppo_spo_terminate", "spo_terminate"):
        base = pair_settings(name.removesuffix("_terminate"))
        return {**base, "genpol": [*base["genpol"], "learner.bootstrap_truncation=false"],
                "reference_runs_of": name.removesuffix("_terminate")}
    if name == "trpo":
        return {"env": "Hopper-v5", "steps": 98 * 2048, "rollout": 2048, "reference": "sb3-contrib TRPO",
                "genpol": ["policy=gaussian", "learner=trpo", "env.num_envs=2", "learner.rollout_steps=1024",
                           "learner.cg_iterations=25", "learner.critic_epochs=20", "learner.critic_minibatch_size=128"]}
    if name == "trpo_mean_kl":
        return {**pair_settings("trpo"), "genpol": [*pair_settings("trpo")["genpol"], "learner.kl_reduction=mean"],
                "reference_runs_of": "trpo"}
    if name == "sac":
        return {"env": "Hopper-v5", "steps": 60_000, "rollout": 1000, "reference": "CleanRL sac_continuous_action.py",
                "genpol": ["policy=tanh_gaussian", "learner=sac", "env.num_envs=1", "learner.batching=cleanrl",
                           "learner.actor_update_interval=2", "learner.lr=3e-4", "learner.critic_lr=1e-3",
                           "learner.temperature_lr=1e-3", "learner.critic_reduction=sum",
                           "learner.temperature_loss=alpha", "learner.learning_starts=5000", "learner.batch_size=256",
                           "policy.log_std_min=-5", "policy.log_std_max=2", "policy.log_std_bound=tanh",
                           "learner.compile=true"]}
    if name == "rlpd":
        return {"env": "Hopper-v5", "steps": 50_000, "rollout": 1000, "reference": "ikostrikov/rlpd SACLearner",
                "genpol": ["+experiment=rlpd", "learner.utd=2", "learner.batch_size=128", "learner.learning_starts=5000",
                           "learner.num_qs=10", "learner.critic_hidden_sizes=[256,256]"]}
    if name == "expo":
        c, hidden = EXPO_CPU, ",".join(str(width) for width in EXPO_CPU["hidden"])
        # their base network, schedule, sampler and AdamW (docs/fidelity.md's EXPO rows); td_subsets=independent,
        # clip_edits=false, critic_layer_norm_eps=1e-6 and adjust_target_entropy=true are learner=expo's defaults
        return {"env": "Hopper-v5", "steps": EXPO_STEPS, "rollout": 1000, "reference": "Servo97/EXPO EXPOLearner",
                # eager: seed 1 ran before +experiment=expo compiled its critic step, and every seed runs alike
                "genpol": ["+experiment=expo", "policy=diffusion_expo_authors", "learner.base_weight_decay=1e-4",
                           "learner.compile=false",
                           f"learner.utd={c['utd']}", f"learner.batch_size={c['batch_size']}",
                           f"learner.learning_starts={c['learning_starts']}", f"learner.num_qs={c['num_qs']}",
                           f"learner.num_min_qs={c['num_min_qs']}", f"learner.critic_hidden_sizes=[{hidden}]",
                           f"learner.edit_hidden_sizes=[{hidden}]", f"learner.num_samples={c['samples']}",
                           f"learner.n_edit={c['samples']}", "learner.bootstrap_truncation=false",
                           # as seeds 1-3 ran (the pair's metric is the training episodes' return either way)
                           "pipeline.eval_deterministic=true"]}
    if name == "dppo":
        return {"env": "Hopper-v5", "steps": 500_000, "rollout": 16 * 64 * 4, "reference": "irom-lab/dppo PPODiffusion",
                "genpol": ["+experiment=dppo_hopper", *DPPO_THEIR_NETWORK, "learner.adam_eps=1e-8",
                           "learner.max_grad_norm=null"]}
    if name == "consistency_ac":
        return {"env": "Hopper-v5", "steps": 150_000, "rollout": 1000,
                "reference": "Ding & Jin online.py (OnlineAgent, consistency)",
                "genpol": ["policy=consistency", "learner=consistency_ac", "pipeline=online", "env.num_envs=3",
                           *CONSISTENCY_AC_THEIR_ONLINE]}
    if name == "consistency_ac_offline":
        # offline: the budget counts gradient steps and the metric is the final evaluation; genpol's run
        # takes one env step after its offline phase (total_steps >= 1), which the metric does not see
        return {"env": "Hopper-v5", "steps": CONSISTENCY_AC_OFFLINE_STEPS, "offline": True,
                "reference": "Ding & Jin offline.py (Consistency_QL)",
                # min-max and the deterministic evaluation: the pair's genpol runs were made with them, before the
                # bundle took raw observations and fresh draws (bench/consistency_ac_reevaluate.py reads both ways)
                "genpol": ["+experiment=consistency_ac", *CONSISTENCY_AC_THEIR_OFFLINE, "total_steps=1",
                           "dataset.observations=min_max", "pipeline.eval_deterministic=true"]}
    if name == "consistency_ac_offline_raw":
        # genpol's side with the authors' raw observations (dataset.observations=raw); their runs are the
        # consistency_ac_offline pair's
        base = _pair_settings("consistency_ac_offline")
        return {**base, "genpol": [*(item for item in base["genpol"] if not item.startswith("dataset.observations")),
                                   "dataset.observations=raw"],
                "reference_runs_of": "consistency_ac_offline"}
    if name == "consistency_ac_o2o":
        # steps: the online phase's env steps (the metric's budget); the offline phase runs first, on both sides
        return {"env": "Hopper-v5", "steps": CONSISTENCY_AC_O2O_STEPS, "rollout": 1000,
                "offline_steps": CONSISTENCY_AC_OFFLINE_STEPS,
                "reference": "Ding & Jin offline.py, then online.py --load_id offline (Consistency_QL, OnlineAgent)",
                # the deterministic final evaluation, as the pair's runs were made (its metric is the training return)
                "genpol": ["+experiment=consistency_ac", *consistency_ac_o2o_options(CONSISTENCY_AC_OFFLINE_STEPS),
                           "pipeline.eval_deterministic=true"]}
    raise SystemExit(f"unknown pair {name!r}: ppo, spo, ppo_spo, spo_terminate, ppo_spo_terminate, trpo, sac, rlpd, "
                     f"expo, dppo, consistency_ac, consistency_ac_offline, consistency_ac_offline_raw, consistency_ac_o2o or "
                     f"trpo_mean_kl")


def reference_command(name: str, seed: int, steps: int, args: argparse.Namespace) -> list[str]:
    """The command line of a CleanRL, SPO (``bench/run_reference.py``), RLPD, EXPO or other reference run."""
    if name == "rlpd":
        return [str(args.jax_python), str(ROOT / "bench" / "run_reference_rlpd.py"), "--ref", str(args.ref_rlpd),
                "--dataset", str(Path(args.dataset).resolve()), "--steps", str(steps), "--seed", str(seed), "--utd", "2",
                "--batch-size", "128", "--start-training", "5000", "--config", json.dumps({"num_qs": 10,
                                                                                         "hidden_dims": [256, 256]})]
    if name == "expo":
        c = EXPO_CPU
        # their evaluations at step 1 and after the last step only, as genpol's side evaluates at its end
        return [str(args.jax_python), str(ROOT / "bench" / "run_reference_expo.py"), "--ref", str(args.ref_expo),
                "--dataset", str(Path(args.dataset).resolve()), "--steps", str(steps), "--seed", str(seed),
                "--utd", str(c["utd"]), "--batch-size", str(c["batch_size"]), "--start-training",
                str(c["learning_starts"]), "--eval-interval", str(steps), "--adjust-target-entropy", "--config",
                json.dumps({"num_qs": c["num_qs"], "num_min_qs": c["num_min_qs"], "hidden_dims": c["hidden"],
                            "N": c["samples"], "n_edit_samples": c["samples"]})]
    if name == "consistency_ac":
        return [sys.executable, str(ROOT / "bench" / "run_reference_consistency_ac.py"), "--ref",
                str(args.ref_consistency_ac), "--steps", str(steps), "--seed", str(seed)]
    if name == "consistency_ac_offline":
        return [sys.executable, str(ROOT / "bench" / "run_reference_consistency_ac_offline.py"), "--ref",
                str(args.ref_consistency_ac), "--dataset", str(Path(args.dataset).resolve()), "--steps", str(steps),
                "--seed", str(seed)]
    if name == "consistency_ac_o2o":
        return [sys.executable, str(ROOT / "bench" / "run_reference_consistency_ac_o2o.py"), "--ref",
                str(args.ref_consistency_ac), "--dataset", str(Path(args.dataset).resolve()), "--offline-steps",
                str(CONSISTENCY_AC_OFFLINE_STEPS), "--steps", str(steps), "--seed", str(seed)]
    if name == "dppo":
        return [sys.executable, str(ROOT / "bench" / "run_reference_dppo.py"), "--ref", str(args.ref_dppo),
                "--pretrained", str(pretrained_checkpoint(seed)), "--dataset", str(Path(args.dataset).resolve()),
                "--steps", str(steps), "--seed", str(seed)]
    launcher = [sys.executable, str(ROOT / "bench" / "run_reference.py")]
    if name == "sac":
        script = Path(args.ref_cleanrl) / "cleanrl" / "sac_continuous_action.py"
        return [*launcher, str(script), "--", "--env-id", "Hopper-v5", "--total-timesteps", str(steps),
                "--seed", str(seed), "--no-cuda"]
    if name == "ppo":
        script = Path(args.ref_cleanrl) / "cleanrl" / "ppo_continuous_action.py"
        return [*launcher, str(script), "--", "--env-id", "Hopper-v5", "--total-timesteps", str(steps),
                "--seed", str(seed), "--no-cuda"]
    script = Path(args.ref_spo) / "mujoco" / "main.py"
    algo = "ppo" if name == "ppo_spo" else "spo"
    return [*launcher, str(script), "--call", "main", "--call-args", json.dumps(["Hopper-v5", seed, algo]), "--",
            "--total_time_steps", str(steps)]


def pretrained_checkpoint(seed: int) -> Path:
    """The dppo pair's shared start: the last pretraining checkpoint of genpol's run of ``seed`` (its
    ``pretrain/summary.json`` marks the phase done), waited for while that run pretrains."""
    run_dir = RUN_ROOT / f"dppo-genpol-s{seed}"
    deadline = time.monotonic() + PRETRAINED_WAIT_S
    while not (run_dir / "pretrain" / "summary.json").exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{run_dir}: genpol's pretraining did not finish within {PRETRAINED_WAIT_S} s; "
                             f"run the pair's genpol side (--sides genpol) first or beside this one")
        time.sleep(10)
    from genpol.checkpoint import list_checkpoints

    return list_checkpoints(run_dir / "pretrain" / "checkpoints")[-1]


# --------------------------------------------------------------------------- the metric
def last_rollouts_mean(per_rollout: dict[int, float], steps: int, rollout: int) -> float:
    """Mean of ``per_rollout`` (rollout index -> the mean return of the episodes that ended in it) over the
    last ``LAST_FRACTION`` of the ``steps // rollout`` rollouts (at least one)."""
    count = steps // rollout
    first = count - max(1, round(LAST_FRACTION * count))
    means = [value for index, value in per_rollout.items() if first <= index < count]
    if not means:
        raise RuntimeError(f"no episode ended in rollouts {first}..{count - 1} of {rollout} steps")
    return float(np.mean(means))


def episode_means(episodes: Sequence[tuple[int, float]], rollout: int) -> dict[int, float]:
    """Rollout index -> mean return of the episodes that ended in it; ``episodes``: ``(env steps when it
    ended, counting from 1, return)``."""
    per_rollout: dict[int, list[float]] = {}
    for step, value in episodes:
        per_rollout.setdefault((step - 1) // rollout, []).append(value)
    return {index: float(np.mean(values)) for index, values in per_rollout.items()}


def run_reference_script(name: str, seed: int, settings: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    run_dir = RUN_ROOT / f"{name}-reference-s{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)  # a run cut short starts over: the scripts cannot resume
    run_dir.mkdir(parents=True)
    # CleanRL's scripts import its cleanrl_utils package from the snapshot's root
    path = [args.ref_site, args.ref_cleanrl if name in ("ppo", "sac") else None, os.environ.get("PYTHONPATH")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path)),
           "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
           "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}
    subprocess.run(reference_command(name, seed, settings["steps"], args), cwd=run_dir, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if args.quiet else None)
    timing = json.loads((run_dir / "reference_run.json").read_text())
    if settings.get("offline"):
        final = json.loads((run_dir / "evals.jsonl").read_text().splitlines()[-1])
        return offline_result(final["return"], final["normalized_score"], timing["wall_time_s"],
                              timing["gradient_steps"])
    episodes = [json.loads(line) for line in (run_dir / "episodes.jsonl").read_text().splitlines()]
    per_rollout = episode_means([(row["step"], row["return"]) for row in episodes], settings["rollout"])
    evals = run_dir / "evals.jsonl"  # the RLPD loop's evaluations (deterministic, 10 episodes)
    final_eval = ({"eval_return_mean": json.loads(evals.read_text().splitlines()[-1])["return"]}
                  if evals.exists() and evals.read_text().strip() else {})
    offline = {}
    if "offline_final_eval" in timing:  # consistency_ac_o2o: their offline phase, before the online one
        offline = {"offline_eval_return_mean": timing["offline_final_eval"]["return"],
                   "offline_gradient_steps": timing["offline"]["gradient_steps"],
                   "offline_ms_per_gradient_step": timing["offline"]["ms_per_gradient_step"]}
    return {**final_eval, "metric": last_rollouts_mean(per_rollout, settings["steps"], settings["rollout"]),
            "episodes": len(episodes), "wall_time_s": timing["wall_time_s"],
            "ms_per_env_step": 1000 * timing["wall_time_s"] / timing["env_steps"], **offline}


def offline_result(final_return: float, normalized: float | None, wall_s: float, gradient_steps: int
                   ) -> dict[str, Any]:
    """An offline pair's run: the metric is the final evaluation's mean return; its time is per gradient step
    (stored under ``ms_per_env_step`` so the table's column reads both kinds)."""
    return {"metric": float(final_return), "eval_return_mean": float(final_return), "normalized_score": normalized,
            "gradient_steps": int(gradient_steps), "wall_time_s": wall_s,
            "ms_per_env_step": 1000 * wall_s / gradient_steps, "time_unit": "gradient step"}


def run_sb3_trpo(seed: int, settings: dict[str, Any]) -> dict[str, Any]:
    import torch
    from sb3_contrib import TRPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    episodes: list[tuple[int, float]] = []
    env = VecNormalize(make_vec_env("Hopper-v5", n_envs=2, seed=seed), gamma=0.99)  # make_vec_env adds Monitor
    model = TRPO("MlpPolicy", env, n_steps=1024, batch_size=128, gamma=0.99, gae_lambda=0.95, cg_max_steps=25,
                 cg_damping=0.1, n_critic_updates=20, learning_rate=1e-3, target_kl=0.01, seed=seed, device="cpu")

    from stable_baselines3.common.callbacks import BaseCallback

    class Episodes(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    episodes.append((self.num_timesteps, float(info["episode"]["r"])))
            return True

    start = time.perf_counter()
    model.learn(total_timesteps=settings["steps"], callback=Episodes())
    wall = time.perf_counter() - start
    per_rollout = episode_means(episodes, settings["rollout"])
    return {"metric": last_rollouts_mean(per_rollout, settings["steps"], settings["rollout"]), "episodes": len(episodes),
            "wall_time_s": wall, "ms_per_env_step": 1000 * wall / settings["steps"]}


def dataset_overrides(name: str, dataset: str) -> list[str]:
    """genpol's dataset options for pair ``name``: none for a pair without data. Their loaders are
    ``d4rl.qlearning_dataset``'s, which drops a timed-out episode's last row (``truncated_rows=drop``)."""
    if name not in DATASET_PAIRS:
        return []
    return [f"dataset.path={Path(dataset).resolve()}", "dataset.truncated_rows=drop"]


def run_genpol(name: str, seed: int, settings: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    run_dir = RUN_ROOT / f"{name}-genpol-s{seed}"
    dataset = dataset_overrides(name, args.dataset)
    if settings.get("offline"):
        summary = train_once(run_dir, [*GENPOL_COMMON, *settings["genpol"], *dataset, f"seed={seed}"],
                             marker="pretrain/summary.json")
        return offline_result(summary["eval_return_mean"], summary.get("normalized_score"), summary["wall_time_s"],
                              summary["gradient_steps"])
    summary = train_once(run_dir, [*GENPOL_COMMON, *settings["genpol"], *dataset, f"total_steps={settings['steps']}",
                                   f"seed={seed}"], steps=settings["steps"])
    rows = read_progress(run_dir)
    # genpol logs each rollout's mean as charts/episodic_return at the rollout's last step
    per_rollout = {(row["global_step"] - 1) // settings["rollout"]: row["charts/episodic_return"]
                   for row in rows if "charts/episodic_return" in row}
    offline = {}
    if settings.get("offline_steps"):  # consistency_ac_o2o: the offline phase before the online one
        pretrained = read_summary(run_dir, "pretrain")
        offline = {"offline_eval_return_mean": pretrained["eval_return_mean"],
                   "offline_gradient_steps": pretrained["gradient_steps"],
                   "offline_ms_per_gradient_step": 1000 * pretrained["wall_time_s"] / pretrained["gradient_steps"]}
    return {"metric": last_rollouts_mean(per_rollout, settings["steps"], settings["rollout"]), "eval_return_mean": summary["eval_return_mean"],
            "wall_time_s": summary["train_time_s"], "ms_per_env_step": 1000 * summary["train_time_s"] / summary["env_steps"],
            **offline}


def dataset_identity(path: Path) -> dict[str, Any]:
    """What names the data a run trained on: its file's name, sha256 and size, and its rows (transitions as
    stored, before the loader's checks). ``bench/make_hopper_medium.sh`` makes the file on each machine from its
    own PPO run, so two machines' files may differ (2026-12-05's Zen 4 and 2026-12-06's Zen 5 made the same data,
    as far as the authors' deterministic offline runs show: docs/fidelity.md)."""
    import h5py

    from genpol.checkpoint import file_sha256

    with h5py.File(path, "r") as data:
        rows = int(data["rewards"].shape[0])
    return {"file": path.name, "sha256": file_sha256(path), "bytes": path.stat().st_size, "rows": rows}


# --------------------------------------------------------------------------- the verdict
def median_difference_ci(ours: Sequence[float], theirs: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Percentile-bootstrap interval of median(ours) - median(theirs), each side resampled on its own:
    exact (every pair of resamples) up to ``EXACT_BOOTSTRAP_MAX_SEEDS`` values a side, as genpol.report."""
    from genpol.report import EXACT_BOOTSTRAP_MAX_SEEDS

    def medians(values: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        """The distinct medians of every resample and how many resamples give each (n^n in all)."""
        values = np.asarray(values, dtype=np.float64)
        n = len(values)
        if n > EXACT_BOOTSTRAP_MAX_SEEDS:
            raise ValueError(f"exact bootstrap up to {EXACT_BOOTSTRAP_MAX_SEEDS} seeds a side, got {n}")
        return np.unique(np.median(values[np.array(list(itertools.product(range(n), repeat=n)))], axis=1),
                         return_counts=True)

    # every pair of resamples, counted rather than listed: 6 seeds a side are 46656^2 pairs (16 GiB as a table),
    # but at most 21 distinct medians a side
    (ours_medians, ours_counts), (theirs_medians, theirs_counts) = medians(ours), medians(theirs)
    differences = (ours_medians[:, None] - theirs_medians[None, :]).ravel()
    weights = (ours_counts[:, None].astype(object) * theirs_counts[None, :]).ravel()  # exact integers
    order = np.argsort(differences, kind="stable")
    differences, cumulative = differences[order], np.cumsum(weights[order])
    total = int(cumulative[-1])
    tail = Fraction((1.0 - confidence) / 2).limit_denominator(10**6)

    def quantile(q: Fraction) -> float:
        """The smallest difference whose cumulative share reaches q (numpy's "inverted_cdf")."""
        return float(differences[next(i for i, c in enumerate(cumulative) if c * q.denominator >= q.numerator * total)])

    return quantile(tail), quantile(1 - tail)


def summarize(name: str, runs: dict[str, dict[str, Any]], reference_name: str | None = None) -> dict[str, Any] | None:
    """The pair's verdict; ``reference_name``: the pair whose reference runs it shares (default its own)."""
    from genpol.report import bootstrap_median_ci

    owner = {"reference": reference_name or name, "genpol": name}
    sides = {side: [row for key, row in sorted(runs.items()) if key.startswith(f"{owner[side]}/{side}/")]
             for side in ("reference", "genpol")}
    if min(len(rows) for rows in sides.values()) < 2:
        return None
    out: dict[str, Any] = {}
    for side, rows in sides.items():
        values = [row["metric"] for row in rows]
        out[side] = {"seeds": len(values), "median": float(np.median(values)), "ci95": bootstrap_median_ci(values),
                     "values": values, "ms_per_env_step_median": float(np.median([r["ms_per_env_step"] for r in rows]))}
    low, high = median_difference_ci(out["genpol"]["values"], out["reference"]["values"])
    out["difference_of_medians"] = out["genpol"]["median"] - out["reference"]["median"]
    out["difference_ci95"] = [low, high]
    out["parity"] = bool(low <= 0.0 <= high)
    out["time_ratio_genpol_to_reference"] = out["genpol"]["ms_per_env_step_median"] / out["reference"]["ms_per_env_step_median"]
    return out


def spo_claim(runs: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The SPO paper's claim, SPO above PPO at the same settings, on each codebase: the medians of the
    ``spo`` and ``ppo_spo`` pairs' runs and the bootstrap interval of their difference (SPO - PPO)."""
    out: dict[str, Any] = {}
    for side in ("reference", "genpol"):
        spo = [row["metric"] for key, row in sorted(runs.items()) if key.startswith(f"spo/{side}/")]
        ppo = [row["metric"] for key, row in sorted(runs.items()) if key.startswith(f"ppo_spo/{side}/")]
        if min(len(spo), len(ppo)) < 2:
            return None
        low, high = median_difference_ci(spo, ppo)
        out[side] = {"spo_median": float(np.median(spo)), "ppo_median": float(np.median(ppo)), "seeds": [len(spo), len(ppo)],
                     "difference_ci95": [low, high],
                     "verdict": "SPO above PPO" if low > 0 else "PPO above SPO" if high < 0 else "no difference shown"}
    return out


def markdown(payload: dict[str, Any]) -> str:
    """The learning-level table of ``docs/fidelity.md`` from the results: one row per pair with a summary."""
    lines = ["| pair (task, budget) | authors' side: median (95 % CI), seeds | genpol: median (95 % CI), seeds "
             "| difference of medians, 95 % CI | parity | ms per env step (offline: per gradient step), authors' / genpol (ratio) |",
             "|---|---|---|---|---|---|"]
    for name, pair in payload.get("pairs", {}).items():
        summary = pair.get("summary")
        if not summary:
            continue
        ref, ours = summary["reference"], summary["genpol"]
        interval = lambda ci: f"{ci[0]:.0f}-{ci[1]:.0f}"  # noqa: E731
        budget = (f"{pair['steps']} gradient steps offline; metric: the final evaluation" if pair.get("offline")
                  else f"{pair['offline_steps']} gradient steps offline, then {pair['steps']} steps"
                  if pair.get("offline_steps") else f"{pair['steps']} steps")
        lines.append(f"| {name}: {pair['reference']} vs genpol ({pair['env']}, {budget}) "
                     f"| {ref['median']:.0f} ({interval(ref['ci95'])}), {ref['seeds']} "
                     f"| {ours['median']:.0f} ({interval(ours['ci95'])}), {ours['seeds']} "
                     f"| {summary['difference_of_medians']:+.0f} ({summary['difference_ci95'][0]:+.0f} to "
                     f"{summary['difference_ci95'][1]:+.0f}) | {'holds' if summary['parity'] else '**not shown**'} "
                     f"| {ref['ms_per_env_step_median']:.3f} / {ours['ms_per_env_step_median']:.3f} "
                     f"({summary['time_ratio_genpol_to_reference']:.2f}) |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="+", default=["ppo", "spo", "trpo", "sac"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--sides", nargs="+", choices=("reference", "genpol"), default=["reference", "genpol"],
                        help="the sides to run: one process per side runs a seed's two sides one per core")
    parser.add_argument("--ref-cleanrl", default="/tmp/ref/vwxyzjn+cleanrl", help="CleanRL snapshot")
    parser.add_argument("--ref-spo", default="/tmp/ref/MyRepositories-hub+Simple-Policy-Optimization",
                        help="SPO snapshot")
    parser.add_argument("--ref-site", default="/tmp/ref/site",
                        help="extra packages the reference scripts need (CleanRL's tyro), put on PYTHONPATH")
    parser.add_argument("--ref-rlpd", default="/tmp/ref/ikostrikov+rlpd", help="ikostrikov/rlpd snapshot")
    parser.add_argument("--ref-consistency-ac",
                        default="/tmp/ref/quantumiracle+Consistency_Model_For_Reinforcement_Learning",
                        help="Ding & Jin's snapshot")
    parser.add_argument("--ref-dppo", default="/tmp/ref/irom-lab+dppo", help="irom-lab/dppo snapshot")
    parser.add_argument("--ref-expo", default="/tmp/ref/Servo97+EXPO", help="Servo97/EXPO snapshot")
    parser.add_argument("--jax-python", default="/tmp/jaxvenv/bin/python",
                        help="a python with jax, flax, optax, tensorflow-probability, ml_collections, gymnasium[mujoco] "
                             "(genpol's mujoco version) and h5py, for the rlpd and expo pairs")
    parser.add_argument("--dataset", default=str(ROOT / "data" / "hopper_medium-v5.hdf5"),
                        help="the rlpd and expo pairs' offline data (bench/make_hopper_medium.sh makes it)")
    parser.add_argument("--quiet", action="store_true", help="hide the reference scripts' stderr")
    parser.add_argument("--table", action="store_true", help="print the results as docs/fidelity.md's table and stop")
    parser.add_argument("--steps", type=int, default=None,
                        help="a trial: this budget for every pair, results to learning_parity_trial.json")
    args = parser.parse_args()
    global RESULTS_NAME, RUN_ROOT
    if args.table:
        print(markdown(read_results(RESULTS_NAME)))
        return
    if args.steps is not None:
        RESULTS_NAME, RUN_ROOT = "learning_parity_trial.json", RUNS / "learning_parity_trial"
    snapshots = {"ppo": args.ref_cleanrl, "spo": args.ref_spo, "ppo_spo": args.ref_spo, "sac": args.ref_cleanrl,
                 "rlpd": args.ref_rlpd, "expo": args.ref_expo, "dppo": args.ref_dppo,
                 "consistency_ac": args.ref_consistency_ac, "consistency_ac_offline": args.ref_consistency_ac,
                 "consistency_ac_o2o": args.ref_consistency_ac, "consistency_ac_offline_raw": args.ref_consistency_ac,
                 "spo_terminate": args.ref_spo, "ppo_spo_terminate": args.ref_spo}
    if set(DATASET_PAIRS) & set(args.pairs) and not Path(args.dataset).exists():
        raise SystemExit(f"the {', '.join(DATASET_PAIRS)} pairs need --dataset {args.dataset}: make it with "
                         f"bench/make_hopper_medium.sh")
    for name in args.pairs:
        settings = pair_settings(name, args.steps)
        commit = None
        if name in snapshots:
            commit = subprocess.run(["git", "-C", snapshots[name], "rev-parse", "HEAD"], capture_output=True,
                                    text=True, check=True).stdout.strip()
        # the dppo pair's reference side starts from genpol's pretraining of the same seed: genpol's side first
        sides = sorted(args.sides, key=lambda side: side != "genpol") if name == "dppo" else args.sides
        for seed, side in itertools.product(args.seeds, sides):
            if side == "reference" and "reference_runs_of" in settings:
                continue  # shared with another pair: run there
            key = f"{name}/{side}/{seed}"
            if key in read_results(RESULTS_NAME).get("runs", {}):
                continue
            print(f"{date_stamp()}  {key}: {settings['steps']} steps", flush=True)
            if side == "genpol":
                row = run_genpol(name, seed, settings, args)
            elif name == "trpo":
                row = run_sb3_trpo(seed, settings)
            else:
                row = run_reference_script(name, seed, settings, args)
            row.update(date=date_stamp(), cpu=cpu_name(), cpu_model=cpu_model(), load_average_1m=os.getloadavg()[0])
            if name in DATASET_PAIRS:  # each machine makes its own file: seeds of a pair may differ in data
                row["dataset"] = dataset_identity(Path(args.dataset))
            print(f"    metric {row['metric']:.1f}   {row['ms_per_env_step']:.3f} ms/{row.get('time_unit', 'env step')}",
                  flush=True)

            def merge(payload: dict[str, Any], key: str = key, row: dict[str, Any] = row, name: str = name,
                      settings: dict[str, Any] = settings, commit: str | None = commit) -> dict[str, Any]:
                payload.setdefault("benchmark", "learning_parity")
                payload.setdefault("metric", f"mean training-episode return over the rollouts in the last "
                                             f"{LAST_FRACTION:.0%} of the budget")
                payload.setdefault("runs", {})[key] = row
                pair = payload.setdefault("pairs", {}).setdefault(name, {})
                pair.update(env=settings["env"], steps=settings["steps"], reference=settings["reference"],
                            reference_commit=commit, genpol_overrides=settings["genpol"],
                            reference_runs_of=settings.get("reference_runs_of", name))
                if settings.get("offline"):
                    pair.update(offline=True, metric="the final evaluation's mean return (10 episodes), "
                                                     "steps and time per gradient step")
                if settings.get("offline_steps"):
                    pair.update(offline_steps=settings["offline_steps"],
                                metric="the online phase's mean training-episode return over the rollouts in its "
                                       f"last {LAST_FRACTION:.0%}; time per online env step")
                summary = summarize(name, payload["runs"], settings.get("reference_runs_of"))
                if summary:
                    pair["summary"] = summary
                claim = spo_claim(payload["runs"])
                if claim:
                    payload["claim_spo_above_ppo"] = claim
                return payload

            update_results(RESULTS_NAME, merge)
    payload = read_results(RESULTS_NAME)
    for name, pair in payload.get("pairs", {}).items():
        summary = pair.get("summary")
        if not summary:
            continue
        print(f"{name:5s} reference {summary['reference']['median']:8.1f} {summary['reference']['ci95']}  "
              f"genpol {summary['genpol']['median']:8.1f} {summary['genpol']['ci95']}  "
              f"diff CI {summary['difference_ci95']}  parity {summary['parity']}  "
              f"time ratio {summary['time_ratio_genpol_to_reference']:.2f}")
    for side, claim in payload.get("claim_spo_above_ppo", {}).items():
        print(f"SPO vs PPO, {side}: SPO {claim['spo_median']:.1f}, PPO {claim['ppo_median']:.1f}, "
              f"difference CI {claim['difference_ci95']}: {claim['verdict']}")


if __name__ == "__main__":
    main()

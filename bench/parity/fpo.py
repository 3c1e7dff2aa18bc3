"""Update-level parity of genpol's FPO head and PPO loss with its authors' code, on identical inputs,
in float64.

The authors' repository (akanazawa/fpo, JAX) is not part of genpol: take a snapshot anywhere and
point ``--ref`` at it. The reference is its ``playground/src/flow_policy/fpo.py`` (the MuJoCo-Playground
FPO whose settings genpol's defaults follow): ``FpoState.init``, ``sample_action``,
``_compute_cfm_loss``, ``_compute_fpo_loss`` and ``_step_minibatch``, run as written. genpol is torch
and theirs JAX, so the comparison runs in processes of this one file:

1. the authors' side, ``init`` (``--jax-python``: jax, optax, jax_dataclasses; never torch or genpol):
   their ``FpoState.init`` draws the velocity MLP (obs + action + 8 -> 4 x 32 SiLU -> action) and the
   critic (obs -> 5 x 256 SiLU -> 1), lecun-uniform with zero biases.
2. genpol's side (this interpreter): ``+experiment=fpo`` builds the head, critic and updater in float64;
   the harness moves their weights by N(0, 0.02^2) (no bias at its constant initial value) and copies
   them into genpol's ``VelocityNetwork`` and ``ValueNetwork`` (kernels transposed; the velocity
   output layer negated: their network predicts u = noise - action in their tau convention, genpol's
   v = action - noise, ``flow_core.from_fpo_code_convention``; negation is exact in floating point, and
   so is Adam's step of a negated gradient). The old (rollout) policy is those weights moved by a
   further N(0, 0.05^2), so that ratios leave the clip range 0.05. genpol's ``FPOHead.sample`` runs on
   the old weights with its draws (x0, the grid indices of t, the noise of the pairs) replaced by the
   harness's: the batch is its record (action, t, noise, old CFM losses), observations N(0, 1),
   advantages 0.3 + 2 N(0, 1), value targets 20 N(0, 1) (their reward_scaling is 10: large targets,
   so that the critic's gradient norm, 0.86 here, exceeds genpol's default clip 0.5). genpol then takes one ``MinibatchUpdater.eager_step``.
3. the authors' side, ``update``: ``sample_action`` on the old weights with the same draws
   (``jax.random.normal`` / ``randint`` replaced; the sampler is compared too), then
   ``_step_minibatch`` on the same batch (T = 1, tau = 1 - t, genpol's old CFM losses as
   ``initial_cfm_loss``) with its Adam recording the gradients; their per-sample CFM losses at the
   new weights from ``_compute_cfm_loss``, and the log-ratio from them by ``_compute_fpo_loss``'s own
   expression.
4. this interpreter compares.

Shims (their package needs mujoco_playground, wandb, mujoco and Python 3.12 syntax in
``rollouts.py``): ``mujoco_playground.MjxEnv`` is a placeholder type, ``flow_policy.rollouts`` a stand-in
holding ``TransitionStruct`` (the same fields) and a ``compute_gae`` that returns the harness's
(returns, advantages): their update recomputes GAE from the current critic inside every minibatch
loss; in the rows below both sides get the same advantages and value targets. One more row compares
exactly that recomputation: genpol's ``learner.advantage_estimation=minibatch`` (an option since
2026-12-02) against their ``compute_gae`` itself, cut unmodified out of ``rollouts.py`` at run time
(the module cannot be imported here), on the same batch read as 4 steps x 128 sub-sequences with
rewards, about 10 % terminal and 10 % truncated steps, and the observations after each sub-sequence. Observation
statistics are the identity (mean 0, std 1): genpol stores normalized observations.

Rows beyond these: ``policy.ratio_mode=per_sample`` against their ``average_losses_before_exp=False``
(per-sample ratios clipped to [-3, 3] before exp, PPO-clipped each), and ``learner.compile=true``
(the experiment's path; its gradients stay inside the graph, so only losses and parameters compare).
A demonstration row: their observation re-normalization at the update's start (genpol's is 0).

Reported per row: the sampler (action, old CFM losses; once), the per-sample CFM losses and the
log-ratio at the starting weights, the policy and value losses, every gradient as the optimizer sees
it and every parameter after the step, as the largest absolute and relative (to the largest
magnitude of the authors' tensor) difference.

Settings matched by options (genpol's defaults differ; each has a row with genpol's value):
``learner.adam_eps=1e-8`` (optax ``scale_by_adam``), ``learner.max_grad_norm=null`` (no clip),
``learner.vf_coef=0.25`` (``value_loss_coeff``), ``policy.critic_hidden_sizes=[256,256,256,256,256]``.
Their time embedding, [cos(2^k tau), sin(2^k tau)] of tau = 1 - t, is ``policy.time_embedding=fpo``
(an option since this harness found it; genpol's default is [sin(2^k pi t), cos(2^k pi t)], a row), and
their advantage normalization by the population std (``jnp.std``) is ``learner.advantage_std=population``
(an option since 2026-12-02, a harness patch before; genpol's default, the unbiased std, a row). No
harness patch is left on genpol's side.

    /tmp/jaxvenv/bin/pip install jax optax jax_dataclasses
    python bench/parity/fpo.py --ref /path/to/fpo --jax-python /tmp/jaxvenv/bin/python

Writes ``bench/results/parity_fpo.json`` (a list of rows: method, repository, commit, differences).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from shared import difference, reference_commit, run_jax_side, worst

ROOT = Path(__file__).resolve().parent.parent.parent
OBS_DIM, ACT_DIM, BATCH, N_MC, STEPS, EMBED = 11, 3, 512, 8, 10, 8  # Hopper's sizes, +experiment=fpo's minibatch
PERTURB, OLD_PERTURB, RETURN_SCALE, SEED = 0.02, 0.2, 20.0, 0
VELOCITY_LAYERS, VALUE_LAYERS = 5, 6
SEQ_LENGTH = 4  # the per-minibatch GAE row: the batch as 4 steps x 128 sub-sequences (their unroll_length x batch_size)
SEQ_BATCH = BATCH // SEQ_LENGTH
SEQUENCE_OPTIONS = ["learner.advantage_estimation=minibatch", f"learner.sequence_length={SEQ_LENGTH}",
                    "learner.reward_scale=10", "learner.gamma=0.995", "learner.gae_lambda=0.95"]
MATCHED = ["learner.adam_eps=1e-8", "learner.max_grad_norm=null", "learner.vf_coef=0.25",
           "policy.critic_hidden_sizes=[256,256,256,256,256]"]


# =========================================================================== the authors' side (JAX)
def import_theirs(ref: Path) -> Any:
    """Their ``flow_policy.fpo`` with shims for what it imports but the update does not use."""
    import types
    from typing import Generic, TypeVar

    import jax
    import jax_dataclasses as jdc
    from jax import Array

    mjp = types.ModuleType("mujoco_playground")
    mjp.MjxEnv = type("MjxEnv", (), {})
    sys.modules["mujoco_playground"] = mjp
    sys.path.insert(0, str(ref / "playground" / "src"))
    import flow_policy  # noqa: F401  (an empty __init__)

    rollouts = types.ModuleType("flow_policy.rollouts")
    action_info = TypeVar("action_info")

    @jdc.pytree_dataclass
    class TransitionStruct(Generic[action_info]):  # their fields; rollouts.py needs Python 3.12 and mujoco
        obs: Array
        next_obs: Array
        action: Array
        action_info: Any
        reward: Array
        truncation: Array
        discount: Array

    rollouts.TransitionStruct = TransitionStruct
    rollouts.gae = None  # (returns, advantages), set by the caller

    def compute_gae(truncation: Any, discount: Any, rewards: Any, values: Any, bootstrap_value: Any,
                    gae_lambda: float) -> Any:
        assert rollouts.gae is not None
        return rollouts.gae

    rollouts.compute_gae = compute_gae
    sys.modules["flow_policy.rollouts"] = rollouts
    flow_policy.rollouts = rollouts
    from flow_policy import fpo

    del jax
    return fpo


class Env:
    """What their ``FpoState`` reads of an environment."""

    observation_size, action_size = OBS_DIM, ACT_DIM


def their_compute_gae(ref: Path) -> Any:
    """Their ``rollouts.compute_gae``, unmodified, from their file: its source is cut out and executed
    here, because the module it lives in needs Python 3.12 syntax, mujoco and wandb to import."""
    import jax
    from jax import Array
    from jax import numpy as jnp

    lines = (ref / "playground" / "src" / "flow_policy" / "rollouts.py").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("def compute_gae("))
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i][0].isspace()
                and not lines[i].startswith(")")), len(lines))
    namespace: dict[str, Any] = {"jax": jax, "jnp": jnp, "Array": Array}
    exec(compile("\n".join(lines[start:end]), str(ref / "playground/src/flow_policy/rollouts.py"), "exec"), namespace)
    return namespace["compute_gae"]


def jax_init(output_path: Path, ref: Path, seed: int) -> None:
    """Their ``FpoState.init``'s weights to ``output_path``."""
    import jax

    jax.config.update("jax_enable_x64", True)
    fpo = import_theirs(ref)
    state = fpo.FpoState.init(jax.random.PRNGKey(seed), Env(), fpo.FpoConfig())
    out = {}
    for name, layers in (("policy", state.params.policy), ("value", state.params.value)):
        for i, (kernel, bias) in enumerate(layers):
            out[f"{name}/{i}/w"], out[f"{name}/{i}/b"] = np.asarray(kernel), np.asarray(bias)
    np.savez(output_path, **out)


def jax_update(inputs_path: Path, output_path: Path, ref: Path) -> None:
    """Their sampler on the old weights and one ``_step_minibatch`` per ratio mode; results to ``output_path``."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import jax_dataclasses as jdc  # noqa: F401 - their FPO code needs it: a missing package fails here, named
    import optax

    fpo = import_theirs(ref)
    from flow_policy import math_utils

    data = dict(np.load(inputs_path))

    def layers(prefix: str, count: int) -> tuple[tuple[Any, Any], ...]:
        return tuple((jnp.asarray(data[f"{prefix}/{i}/w"]), jnp.asarray(data[f"{prefix}/{i}/b"])) for i in range(count))

    current = fpo.FpoParams(policy=layers("current/policy", VELOCITY_LAYERS), value=layers("current/value", VALUE_LAYERS))
    old = fpo.FpoParams(policy=layers("old/policy", VELOCITY_LAYERS), value=layers("old/value", VALUE_LAYERS))
    identity = math_utils.RunningStats(count=jnp.asarray(1.0), mean=jnp.zeros(OBS_DIM), var_sum=jnp.ones(OBS_DIM),
                                       std=jnp.ones(OBS_DIM))
    recorded: list[Any] = []
    adam = optax.scale_by_adam()  # their optimizer (b1 0.9, b2 0.999, eps 1e-8), learning rate applied by hand

    def update(grads: Any, state: Any, params: Any = None) -> Any:
        recorded.append(jax.tree_util.tree_map(np.asarray, grads))
        return adam.update(grads, state, params)

    opt = optax.GradientTransformation(adam.init, update)

    def make_state(config: Any, params: Any, stats: Any = identity) -> Any:
        return fpo.FpoState(env=Env(), config=config, params=params, obs_stats=stats, opt=opt,
                            opt_state=opt.init(params), prng=jax.random.PRNGKey(0), steps=jnp.zeros((), jnp.int32))

    out: dict[str, np.ndarray] = {}
    obs = jnp.asarray(data["batch/obs"])

    # the sampler: their sample_action on the old weights, the harness's draws in place of jax.random's
    draws = {"x0": data["draw/x0"], "eps": data["draw/noise"]}
    normal, randint = jax.random.normal, jax.random.randint

    def given_normal(key: Any, shape: Any = (), dtype: Any = float, *args: Any) -> Any:
        shape = tuple(shape)
        if shape == (STEPS, BATCH, ACT_DIM):  # the SDE noise path, multiplied by sde_sigma = 0
            return jnp.zeros(shape)
        name = {(BATCH, ACT_DIM): "x0", (BATCH, N_MC, ACT_DIM): "eps"}[shape]
        return jnp.asarray(draws[name])

    def given_randint(key: Any, shape: Any, minval: Any, maxval: Any, *args: Any) -> Any:
        assert tuple(shape) == (BATCH, N_MC, 1) and int(maxval) == STEPS
        return jnp.asarray(data["draw/index"])[..., None]

    jax.random.normal, jax.random.randint = given_normal, given_randint
    try:
        action, info = make_state(fpo.FpoConfig(), old).sample_action(obs, jax.random.PRNGKey(1), deterministic=True)
    finally:
        jax.random.normal, jax.random.randint = normal, randint
    out["sampler/action"], out["sampler/cfm_loss"] = np.asarray(action), np.asarray(info.initial_cfm_loss)
    out["sampler/tau"] = np.asarray(info.loss_t)[..., 0]

    # one minibatch step per ratio mode, on genpol's batch
    tau = jnp.asarray(1.0 - data["batch/t"])[None, ..., None]  # [1, B, N, 1], their convention
    transitions = fpo.rollouts.TransitionStruct(
        obs=obs[None], next_obs=obs[None], action=jnp.asarray(data["batch/action"])[None],
        action_info=fpo.FpoActionInfo(loss_eps=jnp.asarray(data["batch/noise"])[None], loss_t=tau,
                                      initial_cfm_loss=jnp.asarray(data["batch/cfm_loss"])[None]),
        reward=jnp.zeros((1, BATCH)), truncation=jnp.zeros((1, BATCH)), discount=jnp.ones((1, BATCH)))
    fpo.rollouts.gae = (jnp.asarray(data["batch/returns"])[None], jnp.asarray(data["batch/advantages"])[None])
    for mode, average in (("average", True), ("per_sample", False)):
        config = fpo.FpoConfig(unroll_length=1, batch_size=BATCH, average_losses_before_exp=average)
        state = make_state(config, current)
        cfm = state._compute_cfm_loss(obs[None], transitions.action, eps=transitions.action_info.loss_eps, t=tau)
        initial = transitions.action_info.initial_cfm_loss
        log_ratio = (jnp.mean(initial, axis=-1, keepdims=True) - jnp.mean(cfm, axis=-1, keepdims=True) if average
                     else jnp.clip(initial - cfm, -3.0, 3.0))  # the arguments of their exp, as in _compute_fpo_loss
        recorded.clear()
        new_state, metrics = state._step_minibatch(transitions, jax.random.PRNGKey(2))
        assert len(recorded) == 1
        out[f"{mode}/cfm_loss"], out[f"{mode}/log_ratio"] = np.asarray(cfm[0]), np.asarray(log_ratio[0])
        out[f"{mode}/policy_loss"], out[f"{mode}/v_loss"] = np.asarray(metrics["policy_loss"]), np.asarray(metrics["v_loss"])
        out[f"{mode}/clipfrac"] = np.asarray(metrics["clipped_ratio_mean"])
        for name, count in (("policy", VELOCITY_LAYERS), ("value", VALUE_LAYERS)):
            for i in range(count):
                out[f"{mode}/grad/{name}/{i}/w"], out[f"{mode}/grad/{name}/{i}/b"] = getattr(recorded[0], name)[i]
                kernel, bias = getattr(new_state.params, name)[i]
                out[f"{mode}/after/{name}/{i}/w"], out[f"{mode}/after/{name}/{i}/b"] = np.asarray(kernel), np.asarray(bias)

    # per-minibatch GAE: the same 512 samples as 4 steps x 128 sub-sequences, their compute_gae recomputing
    # advantages and value targets from the current critic inside the loss (genpol's
    # learner.advantage_estimation=minibatch)
    def steps_first(array: Any) -> Any:
        return jnp.asarray(array).reshape(SEQ_LENGTH, SEQ_BATCH, *np.shape(array)[1:])

    sequence_obs = steps_first(data["batch/obs"])
    next_obs = jnp.concatenate([sequence_obs[1:], jnp.asarray(data["seq/bootstrap_obs"])[None]], axis=0)
    sequence_tau = steps_first(1.0 - data["batch/t"])[..., None]
    sequences = fpo.rollouts.TransitionStruct(
        obs=sequence_obs, next_obs=next_obs, action=steps_first(data["batch/action"]),
        action_info=fpo.FpoActionInfo(loss_eps=steps_first(data["batch/noise"]), loss_t=sequence_tau,
                                      initial_cfm_loss=steps_first(data["batch/cfm_loss"])),
        reward=jnp.asarray(data["seq/rewards"]), truncation=jnp.asarray(data["seq/truncated"], jnp.float64),
        discount=1.0 - jnp.asarray(data["seq/terminated"], jnp.float64))
    stand_in, fpo.rollouts.compute_gae = fpo.rollouts.compute_gae, their_compute_gae(ref)
    try:
        config = fpo.FpoConfig(unroll_length=SEQ_LENGTH, batch_size=SEQ_BATCH)
        state = make_state(config, current)
        cfm = state._compute_cfm_loss(sequence_obs, sequences.action, eps=sequences.action_info.loss_eps, t=sequence_tau)
        initial = sequences.action_info.initial_cfm_loss
        log_ratio = jnp.mean(initial, axis=-1, keepdims=True) - jnp.mean(cfm, axis=-1, keepdims=True)
        recorded.clear()
        new_state, metrics = state._step_minibatch(sequences, jax.random.PRNGKey(2))
        assert len(recorded) == 1
    finally:
        fpo.rollouts.compute_gae = stand_in
    out["sequence/cfm_loss"], out["sequence/log_ratio"] = np.asarray(cfm), np.asarray(log_ratio)
    out["sequence/policy_loss"], out["sequence/v_loss"] = np.asarray(metrics["policy_loss"]), np.asarray(metrics["v_loss"])
    out["sequence/clipfrac"] = np.asarray(metrics["clipped_ratio_mean"])
    out["sequence/advantages_mean"] = np.asarray(metrics["advantages_mean"])
    out["sequence/advantages_std"] = np.asarray(metrics["advantages_std"])
    for name, count in (("policy", VELOCITY_LAYERS), ("value", VALUE_LAYERS)):
        for i in range(count):
            out[f"sequence/grad/{name}/{i}/w"], out[f"sequence/grad/{name}/{i}/b"] = getattr(recorded[0], name)[i]
            kernel, bias = getattr(new_state.params, name)[i]
            out[f"sequence/after/{name}/{i}/w"], out[f"sequence/after/{name}/{i}/b"] = np.asarray(kernel), np.asarray(bias)

    # demonstration: their update re-normalizes the stored raw observations with statistics that
    # training_step has just updated with this batch, while initial_cfm_loss was computed at rollout
    # time with the previous statistics: the ratio at the update's start (rollout weights) is not 1.
    # Illustrative only: previous stats from 4096 N(0, 1) observations, this batch N(0.05, 1.05^2)
    rng = np.random.default_rng(7)
    previous = math_utils.RunningStats.init((OBS_DIM,)).update(jnp.asarray(rng.normal(0.0, 1.0, (4096, OBS_DIM))))
    raw = jnp.asarray(rng.normal(0.05, 1.05, (BATCH, OBS_DIM)))
    updated = previous.update(raw)
    config = fpo.FpoConfig(unroll_length=1, batch_size=BATCH)
    before = make_state(config, current, previous)._compute_cfm_loss((raw - previous.mean) / previous.std,
                                                                  transitions.action[0],
                                                                  eps=transitions.action_info.loss_eps[0], t=tau[0])
    after = make_state(config, current, updated)._compute_cfm_loss((raw - updated.mean) / updated.std,
                                                                transitions.action[0],
                                                                eps=transitions.action_info.loss_eps[0], t=tau[0])
    start = np.asarray(before.mean(-1) - after.mean(-1))
    out["obs_norm/start_log_ratio_max_abs"] = np.abs(start).max()
    out["obs_norm/start_clipfrac"] = (np.abs(np.exp(start) - 1) > config.clipping_epsilon).mean()
    from importlib.metadata import version

    meta = {"versions": {m: version(m) for m in ("jax", "optax", "numpy", "jax_dataclasses")},
            "config": {k: v for k, v in vars(fpo.FpoConfig()).items() if isinstance(v, (int, float, bool, str))}}
    out["meta"] = np.array(json.dumps(meta))
    np.savez(output_path, **out)


# =========================================================================== genpol's side (torch)
def linears(module: Any) -> list[Any]:
    import torch

    return [layer for layer in module.modules() if isinstance(layer, torch.nn.Linear)]


def load_weights(head: Any, critic: Any, params: dict[str, np.ndarray], prefix: str) -> None:
    """Their ``(kernel [in, out], bias)`` layers into genpol's: kernels transposed, the velocity output negated."""
    import torch

    with torch.no_grad():
        for name, module, count in (("policy", head.velocity.net, VELOCITY_LAYERS), ("value", critic.net, VALUE_LAYERS)):
            targets = linears(module)
            assert len(targets) == count, (name, len(targets))
            for i, layer in enumerate(targets):
                sign = -1.0 if name == "policy" and i == count - 1 else 1.0
                layer.weight.copy_(sign * torch.from_numpy(params[f"{prefix}/{name}/{i}/w"]).T)
                layer.bias.copy_(sign * torch.from_numpy(params[f"{prefix}/{name}/{i}/b"]))


def their_layout(head: Any, critic: Any, tensors: dict[int, Any] | None = None) -> dict[str, np.ndarray]:
    """genpol's parameters (or, with ``tensors`` {id(parameter): gradient}, their gradients) in the authors' layout."""
    out = {}
    for name, module, count in (("policy", head.velocity.net, VELOCITY_LAYERS), ("value", critic.net, VALUE_LAYERS)):
        for i, layer in enumerate(linears(module)):
            sign = -1.0 if name == "policy" and i == count - 1 else 1.0
            for key, parameter in (("w", layer.weight), ("b", layer.bias)):
                value = parameter.detach() if tensors is None else tensors[id(parameter)]
                value = sign * (value.T if key == "w" else value)
                out[f"{name}/{i}/{key}"] = value.numpy().copy()
    return out


def with_eager(overrides: list[str]) -> list[str]:
    """``learner.compile=false`` (the harness's default: gradients observable) unless the overrides set it."""
    return overrides if any(o.startswith("learner.compile=") for o in overrides) else ["learner.compile=false", *overrides]


def build(overrides: list[str]) -> tuple[Any, Any, Any, Any]:
    import torch

    from genpol.algorithms.registry import make_critic, make_updater
    from genpol.api import compose_config
    from genpol.build import make_head
    from genpol.configure import validate

    torch.set_default_dtype(torch.float64)
    try:
        cfg = validate(compose_config(["+experiment=fpo", "env=hopper", "run_dir=/tmp/genpol_parity_fpo_unused",
                                       *with_eager(overrides)]))
        head = make_head(cfg.policy, OBS_DIM, ACT_DIM)
        critic = make_critic(cfg.policy, OBS_DIM)
        updater = make_updater(cfg.learner, head, critic)
    finally:
        torch.set_default_dtype(torch.float32)
    return cfg, head, critic, updater


def genpol_inputs(init: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """The starting and old weights, the draws, and the batch (genpol's sampler on the old weights)."""
    import torch

    from genpol.heads import fpo as fpo_module

    rng = np.random.default_rng(seed)
    inputs: dict[str, np.ndarray] = {}
    for key, value in init.items():
        current = value + PERTURB * rng.standard_normal(value.shape)
        inputs[f"current/{key}"], inputs[f"old/{key}"] = current, current + OLD_PERTURB * rng.standard_normal(value.shape)
    inputs["batch/obs"] = rng.standard_normal((BATCH, OBS_DIM))
    inputs["draw/x0"] = rng.standard_normal((BATCH, ACT_DIM))
    inputs["draw/index"] = rng.integers(0, STEPS, (BATCH, N_MC))
    inputs["draw/noise"] = rng.standard_normal((BATCH, N_MC, ACT_DIM))
    inputs["batch/advantages"] = 0.3 + 2.0 * rng.standard_normal(BATCH)
    inputs["batch/returns"] = RETURN_SCALE * rng.standard_normal(BATCH)
    inputs["batch/old_values"] = rng.standard_normal(BATCH)  # unused: no value clip on either side

    # genpol's FPOHead.sample on the old weights (with their time embedding), its draws replaced
    _, head, critic, _ = build([*MATCHED, THEIR_EMBEDDING])
    load_weights(head, critic, inputs, "old")
    randn, randint = torch.randn, torch.randint

    def given_randn(*shape: Any, **kwargs: Any) -> Any:
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return torch.from_numpy(inputs[{(BATCH, ACT_DIM): "draw/x0", (BATCH, N_MC, ACT_DIM): "draw/noise"}[shape]])

    def given_randint(low: int, high: int, size: Any, **kwargs: Any) -> Any:
        assert (low, high, tuple(size)) == (0, STEPS, (BATCH, N_MC))
        return torch.from_numpy(inputs["draw/index"])

    fpo_module.torch.randn, fpo_module.torch.randint = given_randn, given_randint
    try:
        with torch.no_grad():
            action, record = head.sample(torch.from_numpy(inputs["batch/obs"]))
    finally:
        fpo_module.torch.randn, fpo_module.torch.randint = randn, randint
    inputs["batch/action"] = action.numpy()
    inputs["batch/t"] = record["t"].double().numpy()  # float32 there (index.float() / steps), exact in float64
    inputs["batch/t_dtype"] = np.array(str(record["t"].dtype))
    inputs["batch/noise"], inputs["batch/cfm_loss"] = record["noise"].numpy(), record["cfm_loss"].numpy()
    # the per-minibatch GAE row: rewards, episode ends (about 10 % terminal, 10 % truncated) and the
    # observation after each sub-sequence
    inputs["seq/rewards"] = rng.standard_normal((SEQ_LENGTH, SEQ_BATCH))
    inputs["seq/terminated"] = rng.random((SEQ_LENGTH, SEQ_BATCH)) < 0.1
    inputs["seq/truncated"] = (rng.random((SEQ_LENGTH, SEQ_BATCH)) < 0.1) & ~inputs["seq/terminated"]
    inputs["seq/bootstrap_obs"] = rng.standard_normal((SEQ_BATCH, OBS_DIM))
    return inputs


def their_options(overrides: list[str], their_embedding: bool, population_std: bool) -> list[str]:
    """``overrides`` plus the options that are their code's time embedding and advantage std, where asked."""
    return [*overrides, *([THEIR_EMBEDDING] if their_embedding else []), *([THEIR_STD] if population_std else [])]


def genpol_step(inputs: dict[str, np.ndarray], overrides: list[str], their_embedding: bool,
                population_std: bool) -> dict[str, np.ndarray]:
    """One ``eager_step`` of genpol's updater on the batch (``compiled_step`` under ``learner.compile=true``,
    whose gradients stay inside the graph); its losses, gradients and parameters after."""
    import torch

    from genpol.heads.flow_core import flow_matching_loss
    from genpol.storage.rollout import Batch

    cfg, head, critic, updater = build(their_options(overrides, their_embedding, population_std))
    load_weights(head, critic, inputs, "current")
    obs, action = torch.from_numpy(inputs["batch/obs"]), torch.from_numpy(inputs["batch/action"])
    t, noise = torch.from_numpy(inputs["batch/t"]), torch.from_numpy(inputs["batch/noise"])
    record = {"action": action, "t": t, "noise": noise, "t_embed": head.velocity.time_embedding(t),
              "cfm_loss": torch.from_numpy(inputs["batch/cfm_loss"])}
    gradients: dict[int, torch.Tensor] = {}
    updater.optimizer.register_step_pre_hook(lambda opt, *_: gradients.update(
        {id(p): p.grad.detach().clone() for group in opt.param_groups for p in group["params"]}))
    with torch.no_grad():
        cfm = flow_matching_loss(head.velocity, obs, action, t, noise, head.loss_weighting, record["t_embed"])
        log_ratio = head.log_ratio(obs, record).log_ratio
    batch = Batch(obs=obs, record=record, advantages=torch.from_numpy(inputs["batch/advantages"]),
                  returns=torch.from_numpy(inputs["batch/returns"]), values=torch.from_numpy(inputs["batch/old_values"]))
    if updater.compiled_step is not None:
        named = updater.compiled_step(batch.obs, batch.record, batch.advantages, batch.returns, batch.values)
    else:
        named = updater.eager_step(batch)
    out = {"cfm_loss": cfm.numpy(), "log_ratio": log_ratio.numpy(), "policy_loss": named["policy"].numpy(),
           # genpol reports its value term before vf_coef; theirs (v_loss) after value_loss_coeff 0.25
           "v_loss": 0.25 * named["value"].numpy(), "clipfrac": named["clipfrac"].numpy()}
    if gradients:
        out.update({f"grad/{k}": v for k, v in their_layout(head, critic, gradients).items()})
    out.update({f"after/{k}": v for k, v in their_layout(head, critic).items()})
    return out


def genpol_sequence_step(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One ``eager_step`` of genpol's updater with ``learner.advantage_estimation=minibatch`` on the batch as
    ``[4, 128]`` sub-sequences (``SequenceBatch``); its losses, gradients and parameters after."""
    import torch

    from genpol.heads.flow_core import flow_matching_loss
    from genpol.storage.sequences import SequenceBatch

    _, head, critic, updater = build([*MATCHED, *SEQUENCE_OPTIONS, THEIR_EMBEDDING, THEIR_STD])
    load_weights(head, critic, inputs, "current")

    def steps_first(name: str) -> torch.Tensor:
        tensor = torch.from_numpy(np.asarray(inputs[name]))
        return tensor.reshape(SEQ_LENGTH, SEQ_BATCH, *tensor.shape[1:])

    obs, action, t, noise = (steps_first(k) for k in ("batch/obs", "batch/action", "batch/t", "batch/noise"))
    record = {"action": action, "t": t, "noise": noise, "t_embed": head.velocity.time_embedding(t),
              "cfm_loss": steps_first("batch/cfm_loss")}
    gradients: dict[int, torch.Tensor] = {}
    updater.optimizer.register_step_pre_hook(lambda opt, *_: gradients.update(
        {id(p): p.grad.detach().clone() for group in opt.param_groups for p in group["params"]}))
    flat_obs, flat = obs.reshape(BATCH, -1), {key: value.reshape(BATCH, *value.shape[2:]) for key, value in record.items()}
    with torch.no_grad():
        cfm = flow_matching_loss(head.velocity, flat_obs, flat["action"], flat["t"], flat["noise"], head.loss_weighting,
                                 flat["t_embed"])
        log_ratio = head.log_ratio(flat_obs, flat).log_ratio
    batch = SequenceBatch(obs=obs, record=record, rewards=torch.from_numpy(inputs["seq/rewards"]),
                          terminated=torch.from_numpy(inputs["seq/terminated"]),
                          truncated=torch.from_numpy(inputs["seq/truncated"]),
                          values=torch.zeros(SEQ_LENGTH, SEQ_BATCH, dtype=torch.float64),  # no value clip
                          bootstrap_obs=torch.from_numpy(inputs["seq/bootstrap_obs"]))
    named = updater.eager_step(batch)
    out = {"cfm_loss": cfm.numpy(), "log_ratio": log_ratio.numpy(), "policy_loss": named["policy"].numpy(),
           "v_loss": 0.25 * named["value"].numpy(), "clipfrac": named["clipfrac"].numpy()}
    out.update({f"grad/{k}": v for k, v in their_layout(head, critic, gradients).items()})
    out.update({f"after/{k}": v for k, v in their_layout(head, critic).items()})
    return out


# =========================================================================== the comparison
def compare(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray], mode: str,
            inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    def group(prefix: str, network: str, against: str | None = None) -> dict[str, float]:
        keys = sorted(k for k in ours if k.startswith(f"{prefix}/{network}/"))
        assert keys
        if against is None:
            return worst([difference(ours[k], theirs[f"{mode}/{k}"]) for k in keys])
        return worst([difference(ours[k] - inputs[f"{against}/{k[len(prefix) + 1:]}"],
                                 theirs[f"{mode}/{k}"] - inputs[f"{against}/{k[len(prefix) + 1:]}"]) for k in keys])

    return {
        "cfm_loss (per sample)": difference(ours["cfm_loss"], theirs[f"{mode}/cfm_loss"]),
        "log_ratio": difference(ours["log_ratio"], theirs[f"{mode}/log_ratio"]),
        "policy_loss": difference(ours["policy_loss"], theirs[f"{mode}/policy_loss"]),
        "value_loss": difference(ours["v_loss"], theirs[f"{mode}/v_loss"]),
        "clipfrac": {"genpol": float(ours["clipfrac"]), "theirs": float(theirs[f"{mode}/clipfrac"])},
        "gradients": ({"velocity": group("grad", "policy"), "value": group("grad", "value")}
                      if "grad/policy/0/w" in ours else "not recorded (inside the compiled graph)"),
        "their gradient norm": {network: float(np.sqrt(sum(np.square(v).sum() for k, v in theirs.items()
                                                           if k.startswith(f"{mode}/grad/{key}/"))))
                                for network, key in (("velocity", "policy"), ("value", "value"))},
        "parameters_after": {"velocity": group("after", "policy"), "value": group("after", "value")},
        "step (after - before)": {"velocity": group("after", "policy", "current"),
                                  "value": group("after", "value", "current")},
    }


def run_jax(args: argparse.Namespace, *command: str) -> None:
    run_jax_side(args.jax_python, __file__, *command, "--ref", str(args.ref))


THEIR_EMBEDDING = "policy.time_embedding=fpo"  # an option since 2026-12-02 (a harness patch before)
THEIR_STD = "learner.advantage_std=population"  # an option since 2026-12-02 (a harness patch before)
SETTINGS = [
    # (label, overrides beyond +experiment=fpo (and learner.compile=false), their embedding, population std, their mode)
    ("matched: options (policy.time_embedding=fpo, learner.advantage_std=population among them)", MATCHED, True, True,
     "average"),
    ("matched, genpol's advantage std (unbiased)", MATCHED, True, False, "average"),
    ("matched, genpol's time embedding (2^k pi t)", MATCHED, False, True, "average"),
    ("matched, learner.adam_eps=1e-5 (genpol's default)", [*MATCHED, "learner.adam_eps=1e-5"], True, True, "average"),
    ("matched, learner.max_grad_norm=0.5 per network (genpol's default)", [*MATCHED, "learner.max_grad_norm=0.5"],
     True, True, "average"),
    ("matched, learner.vf_coef=0.5 (genpol's default)", [*MATCHED, "learner.vf_coef=0.5"], True, True, "average"),
    ("policy.ratio_mode=per_sample (their average_losses_before_exp=False), matched",
     [*MATCHED, "policy.ratio_mode=per_sample"], True, True, "per_sample"),
]
COMPILED = ("matched, learner.compile=true (the experiment's)", [*MATCHED, "learner.compile=true"], True, True, "average")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", type=Path, required=True, help="a snapshot of akanazawa/fpo")
    parser.add_argument("--jax-python", type=Path, default=Path("/tmp/jaxvenv/bin/python"),
                        help="a Python with jax, optax and jax_dataclasses")
    parser.add_argument("--jax-init", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--jax-update", nargs=2, type=Path, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--eager-only", action="store_true", help="skip the learner.compile=true row (~1 min)")
    args = parser.parse_args()
    if args.jax_init:
        jax_init(args.jax_init, args.ref.resolve(), args.seed)
        return
    if args.jax_update:
        jax_update(*args.jax_update, args.ref.resolve())
        return

    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT / "bench"))  # bench/common (this script lives one folder down)
    from common import date_stamp, machine, write_results

    args.ref = args.ref.resolve()
    commit = reference_commit(args.ref)
    with tempfile.TemporaryDirectory(prefix="parity_fpo_") as folder:
        init_path, in_path, out_path = Path(folder) / "init.npz", Path(folder) / "in.npz", Path(folder) / "out.npz"
        run_jax(args, "--jax-init", str(init_path), "--seed", str(args.seed))
        inputs = genpol_inputs(dict(np.load(init_path)), args.seed)
        np.savez(in_path, **inputs)
        run_jax(args, "--jax-update", str(in_path), str(out_path))
        theirs = dict(np.load(out_path))
    meta = json.loads(str(theirs["meta"]))
    sampler = {"action": difference(inputs["batch/action"], theirs["sampler/action"]),
               "old cfm_loss": difference(inputs["batch/cfm_loss"], theirs["sampler/cfm_loss"]),
               "tau = 1 - t": difference(1.0 - inputs["batch/t"], theirs["sampler/tau"]),
               "genpol's t dtype": str(inputs["batch/t_dtype"])}
    common_fields = {"method": "fpo", "repository": "akanazawa/fpo", "commit": commit,
                     "file": "playground/src/flow_policy/fpo.py: FpoState.init, sample_action, _compute_cfm_loss, "
                             "_compute_fpo_loss, _step_minibatch",
                     "dtype": "float64", "date": date_stamp(), "machine": machine(), "reference_stack": meta["versions"],
                     "reference_config": meta["config"], "batch": BATCH, "n_mc": N_MC}
    rows = [{**common_fields, "setting": "sampler: their sample_action vs FPOHead.sample, old weights, same draws, "
                                         "their time embedding", "differences": sampler},
            {**common_fields, "setting": "demonstration: their observation re-normalization (stats updated with the "
                                         "batch before the update; genpol: 0 by construction)",
             "differences": {"log_ratio at the update's start, max abs": float(theirs["obs_norm/start_log_ratio_max_abs"]),
                             "fraction outside the 0.05 clip": float(theirs["obs_norm/start_clipfrac"])}}]
    for label, overrides, embedding, population, mode in SETTINGS + ([] if args.eager_only else [COMPILED]):
        ours = genpol_step(inputs, overrides, embedding, population)
        rows.append({**common_fields, "setting": label,
                     "overrides": ["+experiment=fpo", *with_eager(their_options(overrides, embedding, population))],
                     "harness_patches": [],
                     "their_average_losses_before_exp": mode == "average",
                     "differences": compare(ours, theirs, mode, inputs)})
    sequence_label = ("matched, per-minibatch GAE: learner.advantage_estimation=minibatch against their compute_gae "
                      f"(the batch as {SEQ_LENGTH} steps x {SEQ_BATCH} sub-sequences, ~10 % terminal, ~10 % truncated)")
    rows.append({**common_fields, "setting": sequence_label,
                 "overrides": ["+experiment=fpo", "learner.compile=false", *MATCHED, *SEQUENCE_OPTIONS, THEIR_EMBEDDING,
                               THEIR_STD],
                 "harness_patches": [], "their_compute_gae": "unmodified, cut out of rollouts.py",
                 "their_average_losses_before_exp": True,
                 "differences": compare(genpol_sequence_step(inputs), theirs, "sequence", inputs)})
    write_results("parity_fpo.json", rows)  # a list of rows, as every bench/results/parity*.json
    print(f"sampler (action, old CFM loss) rel: {sampler['action']['rel']:.1e}, {sampler['old cfm_loss']['rel']:.1e}; "
          f"their obs re-normalization: |log r| at the start up to {float(theirs['obs_norm/start_log_ratio_max_abs']):.2e}, "
          f"{float(theirs['obs_norm/start_clipfrac']):.0%} outside the clip\n")
    print("| setting | CFM loss rel | log-ratio rel | policy / value loss rel | clipfrac (genpol / theirs) "
          "| gradients rel (velocity, value) | parameters after rel (velocity, value) | step rel (velocity, value) |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows[2:]:
        d = row["differences"]
        pair = lambda g: g if isinstance(g, str) else ", ".join(f"{v['rel']:.1e}" for v in g.values())  # noqa: E731
        print(f"| {row['setting']} | {d['cfm_loss (per sample)']['rel']:.1e} | {d['log_ratio']['rel']:.1e} "
              f"| {d['policy_loss']['rel']:.1e} / {d['value_loss']['rel']:.1e} "
              f"| {d['clipfrac']['genpol']:.3f} / {d['clipfrac']['theirs']:.3f} | {pair(d['gradients'])} "
              f"| {pair(d['parameters_after'])} | {pair(d['step (after - before)'])} |")


if __name__ == "__main__":
    main()

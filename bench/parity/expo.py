"""Update-level parity of genpol's EXPO learner with its authors' code, on identical inputs, in float64.

The authors' repository (Servo97/EXPO, a fork of pd-perry/EXPO; JAX) is not part of genpol: take a
snapshot anywhere and point ``--ref`` at it. As ``bench/parity/rlpd.py`` (whose design, shims and
weight layout this file follows), the comparison runs in two processes of this one file:

1. genpol's side (this interpreter, genpol's venv): ``EXPO`` built from ``+experiment=expo`` takes one
   ``rlpd_round`` (``utd`` critic minibatches, each with its TD target from the on-the-fly policy and
   its Polyak update, then one base (imitation) step, one edit-policy step and one temperature step on
   the last minibatch) on a fixed batch. The harness only observes it: it records the base policy's
   candidate actions at every next state (``head.candidates``), the edit noise (every
   ``torch.randn_like``: the edits of the candidates, the base's imitation noise, the edit step's
   noise), the target-critic subsets (``_subset_heads``: the ranking and the valuing subset of each
   minibatch), the chosen next actions (``on_the_fly_actions``), the TD targets (``_td_target``) and
   every gradient as the optimizers see it.
2. the authors' side (``--jax-python``, a venv with jax, flax, optax, tensorflow-probability and
   ml_collections; it imports neither torch nor genpol): ``python expo.py --jax-side IN OUT --ref PATH``
   builds their ``EXPOLearner`` from ``configs/expo_config.py`` with the flags of their D4RL scripts
   (``scripts/expo_antmaze``, ``scripts/expo_adroit``: ``hidden_dims (256, 256, 256)``, ``N 8``,
   ``n_edit_samples 8``, ``edit_action_scale 0.05``, ``backup_entropy False``; ``num_min_qs 2`` of
   ``expo_config``), loads the same critics, target critics, edit policy and temperature, and runs their
   jitted ``EXPOLearner.update(batch, utd_ratio)`` unchanged, with three draws replaced by genpol's:
   ``ddpm_train_sampler`` (their base policy's chains: returns genpol's candidate actions),
   tfp's standard-normal sampler (``samplers.normal``: the edit noise of ``sample_batch_actions`` and
   ``update_edit_actor``; their ``_sample_actions`` runs unjitted, its ``__wrapped__``, so that every
   minibatch traces its own draw) and ``jax.random.choice`` (inside their ``subsample_ensemble``).
3. this interpreter compares.

In these rows the base policy is genpol's default (DPPO's residual MLP, cosine schedule), whose
weights do not map onto theirs: its candidate actions are fed to their TD target as an input, their
base update (``update_actor``) runs on its own weights and touches nothing compared here, and the
noise schedules are recorded side by side (``base_policy`` of every row). The base's own update is
compared by ``expo_base.py`` at ``policy=diffusion_expo_authors learner.base_weight_decay=1e-4``
(their network, schedule, loss and optimizer as options), whose rows follow (``--no-base`` skips them).

Starting point as rlpd.py's: genpol's initialization with every parameter moved by N(0, 0.02^2), the
target critics their own perturbation, alpha 0.5. The batch: 256 x utd transitions, observations
N(0, 1), actions U(-0.99, 0.99) (edits of actions near the bounds leave the box: ``clip_edits``
matters), rewards N(0, 1), 20% terminal.

Reported per row: critic loss (last minibatch), edit loss, temperature loss, entropy, the next
actions and TD targets of every minibatch, every gradient (critics of every minibatch, edit policy,
temperature) and every parameter after the round (edit policy, critics, target critics,
temperature), as the largest absolute and relative (to the largest magnitude of the authors' tensor)
difference; the same for the step (after minus before).

Rows: genpol as configured; ``learner.adjust_target_entropy=false`` (their scripts' target); and, at
utd 1, the settings of each departure: ``learner.td_subsets=shared``, ``learner.clip_edits=true``,
``learner.critic_layer_norm_eps=1e-5``; and genpol as configured against their
``adjust_target_entropy=True`` (the flag genpol's default follows).

    python bench/parity/expo.py --ref /path/to/EXPO --jax-python /tmp/jaxvenv/bin/python

Writes ``bench/results/parity_expo.json`` (a list of rows: method, repository, commit, differences).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from expo_base import base_rows
from shared import (GymBox, difference, flatten, reference_commit, run_jax_side, shim_tfp_for_recent_jax,
                    stub_gym_and_packages, unflatten, worst)

ROOT = Path(__file__).resolve().parent.parent.parent
OBS_DIM, ACT_DIM, BATCH = 11, 3, 256  # Hopper's sizes; EXPO's batch_size 256
ALPHA0, PERTURB, SEED = 0.5, 0.02, 0
# the flags their D4RL scripts (train_finetuning.py) pass on top of configs/expo_config.py
THEIR_FLAGS = {"backup_entropy": False, "hidden_dims": (256, 256, 256), "N": 8, "n_edit_samples": 8,
               "edit_action_scale": 0.05, "horizon": 1}


# =========================================================================== genpol's side (torch)
def genpol_config(utd: int, overrides: list[str]) -> Any:
    """``+experiment=expo`` on Hopper plus ``overrides``, for batches handed in directly
    (``learner.offline_ratio=0``, a buffer of one round). Also used by ``bench/authors_cost.py``."""
    from genpol.api import compose_config
    from genpol.configure import validate

    return validate(compose_config(["+experiment=expo", "env=hopper", "run_dir=/tmp/genpol_parity_expo_unused",
                                    f"learner.utd={utd}", "learner.offline_ratio=0",  # batch handed in directly
                                    f"learner.buffer_size={BATCH * utd}", *overrides]))


def genpol_round(utd: int, overrides: list[str], seed: int) -> dict[str, Any]:
    """One genpol ``rlpd_round`` at ``+experiment=expo`` plus ``overrides``, with its inputs, draws and
    results as numpy arrays in flax's layout."""
    import torch

    import genpol.algorithms.expo as expo_module
    from genpol.algorithms.expo import EXPO
    from genpol.build import make_head
    from genpol.storage.replay import ReplayBatch

    # eager: the harness records the round's draws by wrapping Python functions, which a compiled graph does
    # not call (the compiled step is checked against the eager one in tests/test_expo.py)
    cfg = genpol_config(utd, ["learner.compile=false", *overrides])
    torch.manual_seed(seed)
    # the base policy stays float32: the diffusion head's step tables and time input are float32 buffers
    # (it does not run under a float64 default dtype); it is not compared, its candidates are cast to
    # float64 and handed to both sides, and its imitation step gets its batch in float32
    head = make_head(cfg.policy, OBS_DIM, ACT_DIM)
    candidates_32, imitation_32 = head.candidates, head.imitation_loss
    head.candidates = lambda obs, n: candidates_32(obs.float(), n).double()
    head.imitation_loss = lambda obs, actions: imitation_32(obs.float(), actions.float())
    torch.set_default_dtype(torch.float64)  # critics, targets, edit policy, log_alpha and their optimizers
    try:
        algo = EXPO(head, cfg.learner, num_envs=1, obs_dim=OBS_DIM, act_dim=ACT_DIM, capacity=cfg.learner.buffer_size,
                    device=torch.device("cpu"), seed=seed)
    finally:
        torch.set_default_dtype(torch.float32)
    with torch.no_grad():
        for p in [*algo.edit.parameters(), *algo.critic.parameters()]:
            p.add_(PERTURB * torch.randn_like(p))
        for target, online in zip(algo.critic_target.parameters(), algo.critic.parameters()):
            target.copy_(online + PERTURB * torch.randn_like(online))
        algo.log_alpha.fill_(np.log(ALPHA0))

    n = BATCH * utd
    batch = ReplayBatch(obs=torch.randn(n, OBS_DIM, dtype=torch.float64),
                        actions=torch.empty(n, ACT_DIM, dtype=torch.float64).uniform_(-0.99, 0.99),
                        rewards=torch.randn(n, dtype=torch.float64),
                        next_obs=torch.randn(n, OBS_DIM, dtype=torch.float64),
                        dones=(torch.rand(n, dtype=torch.float64) < 0.2).double())
    before = flax_layout(algo)

    # observe (never alter) genpol's round
    def sample(size: int) -> ReplayBatch:
        assert size == n, (size, n)
        return batch

    algo.sampler.sample = sample
    noises, subsets, targets, candidates, next_actions = [], [], [], [], []
    randn_like = torch.randn_like

    def recording_randn_like(*args: Any, **kwargs: Any) -> torch.Tensor:
        noise = randn_like(*args, **kwargs)
        noises.append(noise.detach().clone())
        return noise

    subset_heads, td_target, head_candidates = algo._subset_heads, algo._td_target, head.candidates
    on_the_fly = expo_module.on_the_fly_actions
    algo._subset_heads = lambda: subsets.append(subset_heads()) or subsets[-1]
    algo._td_target = lambda *args: targets.append(td_target(*args)) or targets[-1]
    head.candidates = lambda *args: candidates.append(head_candidates(*args)) or candidates[-1]

    def recording_on_the_fly(*args: Any, **kwargs: Any) -> Any:
        chosen = on_the_fly(*args, **kwargs)
        next_actions.append(chosen[0].detach().clone())
        return chosen

    gradients: dict[str, list[dict[int, torch.Tensor]]] = {"critic": [], "edit": [], "temp": [], "base": []}
    for name, optimizer in (("critic", algo.critic_optimizer), ("edit", algo.edit_optimizer),
                            ("temp", algo.alpha_optimizer), ("base", algo.actor_optimizer)):
        optimizer.register_step_pre_hook(lambda opt, *_, name=name: gradients[name].append(
            {id(p): p.grad.detach().clone() for group in opt.param_groups for p in group["params"]}))
    torch.randn_like, expo_module.on_the_fly_actions = recording_randn_like, recording_on_the_fly
    try:
        named = algo.rlpd_round()
    finally:
        torch.randn_like, expo_module.on_the_fly_actions = randn_like, on_the_fly
    # randn_like: the candidates' edits of every minibatch, the base's imitation noise, the edit step's noise
    assert len(noises) == utd + 2 and len(subsets) == len(candidates) == len(targets) == utd, (
        len(noises), len(subsets), len(candidates), len(targets))
    assert all(len(g) == (utd if k == "critic" else 1) for k, g in gradients.items()), {
        k: len(g) for k, g in gradients.items()}

    out = {"utd": np.array(utd)}
    out.update({f"init/{k}": v for k, v in before.items()})
    out.update({"batch/observations": batch.obs.numpy(), "batch/actions": batch.actions.numpy(),
                "batch/rewards": batch.rewards.numpy(), "batch/masks": (1 - batch.dones).numpy(),
                "batch/next_observations": batch.next_obs.numpy()})
    # their tfp draws, in their order: the candidates' edits of each minibatch, then the edit step's
    # (tfp draws the [B, A] noise of MultivariateNormalDiag as [A, B]: handed over transposed)
    normals = [*noises[:utd], noises[utd + 1]]
    out.update({f"draw/normal/{i}": noise.numpy().T.copy() for i, noise in enumerate(normals)})
    # clamped as on_the_fly_actions clamps them (their sampler ends in the same clip)
    out.update({f"draw/candidates/{i}": c.clamp(-1.0, 1.0).reshape(-1, ACT_DIM).numpy()
                for i, c in enumerate(candidates)})
    # their jax.random.choice calls, in order: each minibatch's ranking subset, then its valuing subset
    choices = [h for heads in subsets for h in (heads if heads.dim() == 2 else [heads, heads])]
    out.update({f"draw/subset/{i}": heads.numpy().astype(np.int64) for i, heads in enumerate(choices)})
    results = {f"after/{k}": v for k, v in flax_layout(algo).items()}
    for name, steps in gradients.items():
        if name == "base":
            continue
        for i, step in enumerate(steps):
            results.update({f"grad/{name}/{i}/{k}": v for k, v in flax_layout(algo, step, name).items()})
    results.update({f"target_q/{i}": t.numpy() for i, t in enumerate(targets)})
    results.update({f"next_actions/{i}": a.numpy() for i, a in enumerate(next_actions)})
    results.update({"info/critic_loss": named["value"].numpy(), "info/edit_actor_loss": named["policy"].numpy(),
                    "info/temperature_loss": named["temperature"].numpy(), "info/entropy": named["entropy"].numpy()})
    base = {"alpha_bar": head.train_alphas_cumprod.double().numpy().tolist(),
            "target_entropy": float(algo.target_entropy)}
    return {"inputs": out, "results": results, "subset_dims": [h.dim() for h in subsets], "base": base}


def flax_layout(algo: Any, gradients: dict[int, Any] | None = None, only: str | None = None) -> dict[str, np.ndarray]:
    """genpol's edit policy, critics, target critics and temperature (or, with ``gradients``
    {id(parameter): gradient}, their gradients) as flat ``<network>/<flax path>`` arrays in the layout
    of the authors' flax parameters (rlpd.py's ``flax_layout``; the edit policy is their ``TanhNormal``
    on an ``MLP`` of three Dense layers)."""
    gaussian = algo.edit.gaussian
    dense = [m for m in gaussian.latent_pi if hasattr(m, "weight")]
    linear = {**{f"MLP_0/Dense_{k}": layer for k, layer in enumerate(dense)},
              "OutputDenseMean": gaussian.mu, "OutputDenseLogStd": gaussian.log_std}
    pairs: list[tuple[str, Any, Any]] = []  # (key, parameter, to flax layout)
    for path, layer in linear.items():
        pairs += [(f"edit/{path}/kernel", layer.weight, lambda t: t.T), (f"edit/{path}/bias", layer.bias, None)]
    for network, ensemble in (("critic", algo.critic), ("target", algo.critic_target)):
        prefix, hidden = f"{network}/VmapStateActionValue_0", len(ensemble.hidden_sizes)
        for k, (weight, bias) in enumerate(zip(ensemble.weights, ensemble.biases)):
            path = f"{prefix}/MLP_0/Dense_{k}" if k < hidden else f"{prefix}/Dense_0"
            pairs += [(f"{path}/kernel", weight, None), (f"{path}/bias", bias, lambda t: t.squeeze(1))]
        for k, (scale, shift) in enumerate(zip(ensemble.ln_scales, ensemble.ln_shifts)):
            pairs += [(f"{prefix}/MLP_0/LayerNorm_{k}/scale", scale, lambda t: t.squeeze(1)),
                      (f"{prefix}/MLP_0/LayerNorm_{k}/bias", shift, lambda t: t.squeeze(1))]
    pairs.append(("temp/log_temp", algo.log_alpha, lambda t: t.reshape(())))
    flat = {}
    for key, parameter, transform in pairs:
        if only is not None and not key.startswith(only + "/"):
            continue
        tensor = parameter.detach() if gradients is None else gradients[id(parameter)]
        flat[key.split("/", 1)[1] if only else key] = (transform(tensor) if transform else tensor).numpy().copy()
    return flat


# =========================================================================== the authors' side (JAX)
def their_learner(ref: Path, obs_dim: int, act_dim: int, adjust_target_entropy: bool, x64: bool = True
                  ) -> tuple[Any, dict[str, Any]]:
    """Their ``EXPOLearner.create(0, ...)`` from ``configs/expo_config.py`` with their D4RL scripts' flags
    (``THEIR_FLAGS``) and ``adjust_target_entropy``, and those keyword arguments. Imports jax, flax, tfp and
    the authors' modules (never torch or genpol); ``x64``: float64 arrays (the parity harness), else jax's
    float32. Also used by ``bench/authors_cost.py``."""
    import jax

    shim_tfp_for_recent_jax()
    jax.config.update("jax_enable_x64", x64)
    import tensorflow_probability.substrates.jax  # noqa: F401  (their modules read it as an attribute)

    # their expo_learner imports gym for an isinstance check, expo.data.dataset for gym.utils.seeding;
    # expo.agents' __init__ imports the pixel (DrQ) agent, expo.data's the replay buffers: not needed
    stub_gym_and_packages(ref, ("expo.agents", "expo.data"))
    from configs import expo_config
    from expo.agents.sac.expo_learner import EXPOLearner

    kwargs = dict(expo_config.get_config())
    kwargs.pop("model_cls")
    kwargs.update(THEIR_FLAGS, adjust_target_entropy=adjust_target_entropy)
    return EXPOLearner.create(0, GymBox(obs_dim), GymBox(act_dim), **kwargs), kwargs


def jax_side(inputs_path: Path, output_path: Path, ref: Path, adjust_target_entropy: bool) -> None:
    """Their ``EXPOLearner.update`` on the inputs of ``inputs_path``; results to ``output_path``.
    Imports jax, flax, optax, tfp and the authors' modules only (never torch or genpol)."""
    import jax

    shim_tfp_for_recent_jax()
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import tensorflow_probability.substrates.jax  # noqa: F401  (their modules read it as an attribute)
    from flax.training.train_state import TrainState
    from tensorflow_probability.substrates.jax.internal import samplers

    data = dict(np.load(inputs_path))
    utd = int(data["utd"])

    def tree(prefix: str) -> dict[str, Any]:
        return unflatten(data, prefix, jnp.asarray)

    agent, kwargs = their_learner(ref, data["batch/observations"].shape[1], data["batch/actions"].shape[1],
                                  adjust_target_entropy)
    import expo.agents.sac.expo_learner as learner_module
    from expo.agents.sac.expo_learner import EXPOLearner
    from expo.networks import vp_beta_schedule

    their_layout = {name: sorted(flatten(getattr(agent, attr).params, "")) for name, attr in
                    (("edit", "edit_actor"), ("critic", "critic"))}
    edit, critic, target, temp = tree("init/edit"), tree("init/critic"), tree("init/target"), tree("init/temp")
    for name, params in (("edit", edit), ("critic", critic)):
        assert sorted(flatten(params, "")) == their_layout[name], (name, sorted(flatten(params, "")), their_layout[name])
    agent = agent.replace(edit_actor=agent.edit_actor.replace(params=edit, opt_state=agent.edit_actor.tx.init(edit)),
                          critic=agent.critic.replace(params=critic, opt_state=agent.critic.tx.init(critic)),
                          target_critic=agent.target_critic.replace(params=target),
                          temp=agent.temp.replace(params=temp, opt_state=agent.temp.tx.init(temp)))

    # genpol's draws in place of theirs, in the order their traced update asks for them
    draws = {"normal": 0, "choice": 0, "candidates": 0}

    def normal(shape: Any, mean: Any = 0.0, stddev: Any = 1.0, dtype: Any = None, seed: Any = None,
               name: Any = None) -> Any:
        noise = data[f"draw/normal/{draws['normal']}"]
        assert tuple(int(s) for s in shape) == noise.shape, (shape, noise.shape)
        draws["normal"] += 1
        return mean + stddev * jnp.asarray(noise, dtype)

    def choice(key: Any, a: Any, shape: Any = (), replace: bool = True, p: Any = None, axis: int = 0) -> Any:
        heads = data[f"draw/subset/{draws['choice']}"]
        assert tuple(shape) == heads.shape and not replace, (shape, heads.shape, replace)
        draws["choice"] += 1
        return jnp.asarray(heads)

    def train_sampler(actor_apply_fn: Any, actor_params: Any, T: Any, rng: Any, act_dim: Any, observations: Any,
                      *args: Any, **kw: Any) -> Any:  # their base policy's chains -> genpol's candidates
        actions = data[f"draw/candidates/{draws['candidates']}"]
        assert actions.shape == (observations.shape[0], act_dim), (actions.shape, observations.shape, act_dim)
        draws["candidates"] += 1
        return jnp.asarray(actions), rng

    samplers.normal = normal
    jax.random.choice = choice
    learner_module.ddpm_train_sampler = train_sampler
    # jitted, it would trace once and replay the first minibatch's edit noise in every later one
    learner_module._sample_actions = learner_module._sample_actions.__wrapped__

    recorded: dict[str, list[Any]] = {"grads": [], "next_qs": [], "next_actions": []}

    def record(name: str, value: Any) -> None:
        jax.debug.callback(lambda v: recorded[name].append(jax.tree_util.tree_map(np.asarray, v)), value,
                           ordered=True)

    apply_gradients = TrainState.apply_gradients

    def recording_apply_gradients(self: Any, *, grads: Any, **kw: Any) -> Any:
        record("grads", grads)
        return apply_gradients(self, grads=grads, **kw)

    TrainState.apply_gradients = recording_apply_gradients
    target_apply = agent.target_critic.apply_fn

    def recording_target_apply(variables: Any, observations: Any, actions: Any, *args: Any, **kw: Any) -> Any:
        value = target_apply(variables, observations, actions, *args, **kw)
        if observations.shape[0] == BATCH:  # update_critic's valuing call (not the ranking one, B x 16 rows)
            record("next_qs", value)
        return value

    sample_batch_actions = EXPOLearner.sample_batch_actions

    def recording_sample_batch_actions(self: Any, observations: Any) -> Any:
        actions = sample_batch_actions(self, observations)
        record("next_actions", actions)
        return actions

    EXPOLearner.sample_batch_actions = recording_sample_batch_actions
    agent = agent.replace(target_critic=agent.target_critic.replace(apply_fn=recording_target_apply))
    batch = {k.split("/", 1)[1]: jnp.asarray(v) for k, v in data.items() if k.startswith("batch/")}
    new_agent, info = agent.update(batch, utd)
    jax.block_until_ready(new_agent)
    jax.effects_barrier()
    assert draws == {"normal": utd + 1, "choice": 2 * utd, "candidates": utd}, draws
    assert len(recorded["grads"]) == utd + 3 and len(recorded["next_qs"]) == utd, {
        k: len(v) for k, v in recorded.items()}

    out: dict[str, np.ndarray] = {}
    for name, params in (("edit", new_agent.edit_actor.params), ("critic", new_agent.critic.params),
                         ("target", new_agent.target_critic.params), ("temp", new_agent.temp.params)):
        out.update({f"after/{k}": v for k, v in flatten(params, name).items()})
    counts = {"edit": 0, "critic": 0, "temp": 0, "base": 0}
    for grads in recorded["grads"]:
        kind = ("edit" if "OutputDenseMean" in grads else "critic" if "VmapStateActionValue_0" in grads
                else "temp" if "log_temp" in grads else "base")
        if kind != "base":
            out.update({f"grad/{kind}/{counts[kind]}/{k}": v for k, v in flatten(grads, "").items()})
        counts[kind] += 1
    assert counts == {"edit": 1, "critic": utd, "temp": 1, "base": 1}, counts
    # their TD target, in update_critic's own expression, from the values their update computed
    for i, next_qs in enumerate(recorded["next_qs"]):
        rows = slice(BATCH * i, BATCH * (i + 1))
        out[f"target_q/{i}"] = data["batch/rewards"][rows] + kwargs["discount"] * data["batch/masks"][rows] * \
            next_qs.min(axis=0)
        out[f"next_actions/{i}"] = recorded["next_actions"][i]
    out.update({f"info/{k}": np.asarray(v) for k, v in info.items()})
    # update_temperature returns no loss: temp_loss = temperature * (entropy - target_entropy), their expression
    temperature = float(np.exp(data["init/temp/log_temp"]))
    out["info/temperature_loss"] = np.asarray(temperature * (np.asarray(info["entropy"]) - float(agent.target_entropy)))
    meta = {"versions": {m: __import__(m).__version__ for m in ("jax", "flax", "optax", "numpy")},
            "tfp": tensorflow_probability.substrates.jax.__version__,
            "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in kwargs.items()},
            "target_entropy": float(agent.target_entropy),
            "alpha_bar": np.asarray(agent.alpha_hats, np.float64).tolist(),
            "vp_betas": np.asarray(vp_beta_schedule(int(kwargs["T"])), np.float64).tolist(),
            "dtypes": sorted({str(v.dtype) for v in out.values()})}
    out["meta"] = np.array(json.dumps(meta))
    np.savez(output_path, **out)


# =========================================================================== the comparison
def compare(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray], init: dict[str, np.ndarray]
            ) -> dict[str, Any]:
    assert set(k for k in ours if not k.startswith("info/")) <= set(theirs), sorted(set(ours) - set(theirs))

    def group(prefix: str, against: dict[str, np.ndarray] | None = None) -> dict[str, float]:
        keys = [k for k in ours if k.startswith(prefix)]
        assert keys, prefix
        if against is None:
            return worst([difference(ours[k], theirs[k]) for k in keys])
        return worst([difference(ours[k] - against["init/" + k[6:]], theirs[k] - against["init/" + k[6:]])
                      for k in keys])

    names = ("edit", "critic", "target", "temp")
    return {
        "losses": {name: difference(ours[f"info/{name}"], theirs[f"info/{name}"])
                   for name in ("critic_loss", "edit_actor_loss", "temperature_loss", "entropy")},
        "next_actions": group("next_actions/"),
        "target_q": group("target_q/"),
        "gradients": {"critic (every minibatch)": group("grad/critic/"), "edit": group("grad/edit/"),
                      "temperature": group("grad/temp/")},
        "parameters_after": {name: group(f"after/{name}/") for name in names},
        "step (after - before)": {name: group(f"after/{name}/", init) for name in names},
    }


def run_jax(inputs: dict[str, np.ndarray], adjust: bool, args: argparse.Namespace, folder: Path
            ) -> dict[str, np.ndarray]:
    tag = f"utd{int(inputs['utd'])}_adjust{int(adjust)}"
    inputs_path, output_path = folder / f"in_{tag}.npz", folder / f"out_{tag}.npz"
    np.savez(inputs_path, **inputs)
    run_jax_side(args.jax_python, __file__, "--jax-side", str(inputs_path), str(output_path), "--ref", str(args.ref),
                 *(["--their-adjust-target-entropy"] if adjust else []))
    return dict(np.load(output_path))


def digest(inputs: dict[str, np.ndarray], skip: str = "draw/subset/") -> str:
    h = hashlib.sha256()
    for key in sorted(inputs):
        if not key.startswith(skip):
            h.update(key.encode() + np.ascontiguousarray(inputs[key]).tobytes())
    return h.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", type=Path, required=True, help="a snapshot of Servo97/EXPO (or pd-perry/EXPO)")
    parser.add_argument("--jax-python", type=Path, default=Path("/tmp/jaxvenv/bin/python"),
                        help="a Python with jax, flax, optax, tensorflow-probability, ml_collections")
    parser.add_argument("--jax-side", nargs=2, type=Path, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--their-adjust-target-entropy", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--utd", type=int, nargs="+", default=[1, 20], help="critic minibatches per round")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--no-base", dest="base", action="store_false", help="skip the base policy's rows")
    args = parser.parse_args()
    if args.jax_side:
        jax_side(*args.jax_side, args.ref.resolve(), args.their_adjust_target_entropy)
        return

    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT / "bench"))  # bench/common (this script lives one folder down)
    from common import date_stamp, machine, write_results

    ref = args.ref.resolve()
    commit = reference_commit(ref)
    matched = ["learner.adjust_target_entropy=false"]
    # (overrides, their adjust_target_entropy, label, utd 1 only)
    settings = [([], False, "as configured (adjust_target_entropy=true) vs their scripts' target", False),
                (matched, False, "learner.adjust_target_entropy=false (their scripts' target)", False),
                ([], True, "as configured vs their adjust_target_entropy=True", True),
                (matched + ["learner.td_subsets=shared"], False, "td_subsets=shared (genpol before)", True),
                (matched + ["learner.clip_edits=true"], False, "clip_edits=true (genpol before)", True),
                (matched + ["learner.critic_layer_norm_eps=1e-5"], False, "critic_layer_norm_eps=1e-5 (torch's)",
                 True)]
    rows, their_results = [], {}
    with tempfile.TemporaryDirectory(prefix="parity_expo_") as folder:
        for utd in args.utd:
            reference = None
            for overrides, adjust, label, first_only in settings:
                if first_only and utd != args.utd[0]:
                    continue
                side = genpol_round(utd, overrides, args.seed)
                inputs = side["inputs"]
                if reference is None:
                    reference = inputs
                # every setting draws the same batch, candidates and noise; shared draws one subset per minibatch
                assert digest(inputs) == digest(reference), f"inputs differ: {label}"
                if all(d == 1 for d in side["subset_dims"]):
                    assert utd == 1 and np.array_equal(inputs["draw/subset/0"], reference["draw/subset/0"]), label
                    inputs = reference  # the authors draw a second (valuing) subset: theirs, as in the other rows
                else:
                    assert all(np.array_equal(inputs[k], reference[k]) for k in inputs), label
                key = (utd, adjust)
                if key not in their_results:
                    their_results[key] = run_jax(reference, adjust, args, Path(folder))
                theirs = their_results[key]
                meta = json.loads(str(theirs["meta"]))
                alpha_bar_ours, alpha_bar_theirs = np.array(side["base"]["alpha_bar"]), np.array(meta["alpha_bar"])
                rows.append({
                    "method": "expo", "repository": "Servo97/EXPO", "commit": commit,
                    "file": "expo/agents/sac/expo_learner.py: EXPOLearner.update, update_critic, sample_batch_actions, "
                            "update_edit_actor, update_temperature (configs/expo_config.py, scripts' flags)",
                    "setting": f"+experiment=expo, utd {utd}, {label}", "overrides": overrides,
                    "dtype": "float64", "date": date_stamp(), "machine": machine(),
                    "reference_stack": {**meta["versions"], "tfp": meta["tfp"]}, "reference_config": meta["config"],
                    "target_entropy": {"genpol": side["base"]["target_entropy"], "authors": meta["target_entropy"]},
                    "base_policy": {
                        "compared": "no: different denoisers (genpol DPPO residual MLP, theirs DDPM LayerNorm ResNet "
                                    "with learned Fourier features); genpol's candidates are fed to their TD target",
                        "alpha_bar_genpol (diffusers squaredcos_cap_v2, float32)": alpha_bar_ours.tolist(),
                        "alpha_bar_authors (vp_beta_schedule)": alpha_bar_theirs.tolist(),
                        "alpha_bar_max_abs_difference": float(np.abs(alpha_bar_ours - alpha_bar_theirs).max())},
                    "differences": compare(side["results"], theirs, reference)})
        # the base policy's imitation step, with every option at the authors' value (bench/parity/expo_base.py)
        shared_fields = {k: rows[0][k] for k in ("method", "repository", "commit", "date", "machine",
                                                  "reference_stack", "reference_config")}
        base = base_rows(ref, args.jax_python, Path(folder), THEIR_FLAGS, shared_fields) if args.base else []
    write_results("parity_expo.json", rows + base)
    print("| setting | critic / edit / temp loss rel | entropy rel | next action abs | target Q rel "
          "| gradients rel (critic, edit, temp) | parameters after rel (edit, critic, target, temp) "
          "| step rel (edit, critic, target, temp) |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        d = row["differences"]
        losses = " / ".join(f"{d['losses'][k]['rel']:.1e}" for k in ("critic_loss", "edit_actor_loss",
                                                                       "temperature_loss"))
        grads = ", ".join(f"{v['rel']:.1e}" for v in d["gradients"].values())
        after = ", ".join(f"{v['rel']:.1e}" for v in d["parameters_after"].values())
        step = ", ".join(f"{v['rel']:.1e}" for v in d["step (after - before)"].values())
        print(f"| {row['setting']} | {losses} | {d['losses']['entropy']['rel']:.1e} | {d['next_actions']['abs']:.1e} "
              f"| {d['target_q']['rel']:.1e} | {grads} | {after} | {step} |")
    print(f"\nbase noise schedule at genpol's default: alpha_bar max abs difference "
          f"{rows[0]['base_policy']['alpha_bar_max_abs_difference']:.3f}")
    print("\n| base imitation step | loss rel | gradients rel | parameters after rel | EMA after rel | step rel |")
    print("|---|---|---|---|---|---|")
    for row in base:
        d = row["differences"]
        print(f"| {row['setting']} | {d['imitation_loss']['rel']:.1e} | {d['gradients']['rel']:.1e} "
              f"| {d['parameters_after']['rel']:.1e} | {d['ema_after']['rel']:.1e} "
              f"| {d['step (after - before)']['rel']:.1e} |")


if __name__ == "__main__":
    main()

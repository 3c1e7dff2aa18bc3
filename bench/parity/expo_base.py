"""Update-level parity of EXPO's base policy step (imitation, then the EMA) with its authors' code, in float64.

Run by ``bench/parity/expo.py`` (which adds its rows to ``bench/results/parity_expo.json``); like it, in two
processes of this one file:

1. genpol's side: ``EXPO.base_step`` at ``+experiment=expo policy=diffusion_expo_authors
   learner.base_weight_decay=1e-4`` (their network, schedule and loss, their ``optax.adamw``) built in
   float64, with every head parameter moved by N(0, 0.02^2) (off flax's zero biases and unit LayerNorms,
   so every term shows), on a batch of 256 Hopper-sized transitions. The harness records the step's
   draws (the timesteps of ``torch.randint``, the noise of ``torch.randn_like``) and its gradients.
2. the authors' side (``--jax-python``): their ``EXPOLearner`` from ``configs/expo_config.py`` with
   the flags of their D4RL scripts, the same weights in their actor and, the EMA copy's, in their
   ``target_actor``, and their ``update_actor`` run eagerly with ``jax.random.randint`` and
   ``jax.random.normal`` returning genpol's draws.

Weight map (genpol ``ExpoDenoiser`` -> their ``DDPM`` flax tree; kernels are weights transposed):
``time_features.kernel`` -> ``FourierFeatures_0/kernel``; ``time_mlp.{0,2}`` -> ``DiffusionMLP_0/Dense_{0,1}``;
``input`` -> ``DiffusionMLPResNet_0/Dense_0``; ``blocks.k.{norm,expand,project}`` ->
``DiffusionMLPResNet_0/MLPResNetBlock_k/{LayerNorm_0,Dense_0,Dense_1}``; ``output`` -> ``DiffusionMLPResNet_0/Dense_1``.

Reported: the imitation loss, every gradient, every parameter after the step and of the EMA copy, and
the step (after minus before), as largest absolute and relative differences (``shared.difference``).
Rows: every option at the authors' value, then each departure alone at genpol's value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from shared import difference, flatten, run_jax_side, unflatten, worst

OBS_DIM, ACT_DIM, BATCH, PERTURB = 11, 3, 256, 0.02
MATCHED = ["policy=diffusion_expo_authors", "learner.base_weight_decay=1e-4"]


def flax_pairs(denoiser: Any) -> list[tuple[str, Any, bool]]:
    """``(flax path, genpol tensor, transpose)`` for every parameter of an ``ExpoDenoiser`` (module docstring)."""
    linear = {"DiffusionMLP_0/Dense_0": denoiser.time_mlp[0], "DiffusionMLP_0/Dense_1": denoiser.time_mlp[2],
              "DiffusionMLPResNet_0/Dense_0": denoiser.input, "DiffusionMLPResNet_0/Dense_1": denoiser.output}
    pairs = [("FourierFeatures_0/kernel", denoiser.time_features.kernel, False)]
    for k, block in enumerate(denoiser.blocks):
        prefix = f"DiffusionMLPResNet_0/MLPResNetBlock_{k}"
        linear.update({f"{prefix}/Dense_0": block.expand, f"{prefix}/Dense_1": block.project})
        pairs += [(f"{prefix}/LayerNorm_0/scale", block.norm.weight, False),
                  (f"{prefix}/LayerNorm_0/bias", block.norm.bias, False)]
    for path, layer in linear.items():
        pairs += [(f"{path}/kernel", layer.weight, True), (f"{path}/bias", layer.bias, False)]
    return pairs


def layout(denoiser: Any, gradients: dict[int, Any] | None = None) -> dict[str, np.ndarray]:
    """The denoiser's parameters (or, with ``gradients`` {id(parameter): gradient}, those) by flax path."""
    flat = {}
    for path, tensor, transpose in flax_pairs(denoiser):
        value = tensor.detach() if gradients is None else gradients[id(tensor)]
        flat[path] = (value.T if transpose else value).numpy().copy()
    return flat


def genpol_base_step(overrides: list[str], seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """One ``EXPO.base_step`` in float64; its inputs, draws and results by flax path."""
    import torch

    from genpol.algorithms.expo import EXPO
    from genpol.api import compose_config
    from genpol.build import make_head
    from genpol.configure import validate
    from genpol.storage.replay import ReplayBatch

    cfg = validate(compose_config(["+experiment=expo", "env=hopper", "run_dir=/tmp/genpol_parity_expo_unused",
                                   "learner.utd=1", "learner.offline_ratio=0", f"learner.buffer_size={BATCH}",
                                   *overrides]))
    torch.manual_seed(seed)
    torch.set_default_dtype(torch.float64)  # the head, its schedule tables and the optimizer
    try:
        head = make_head(cfg.policy, OBS_DIM, ACT_DIM)
        algo = EXPO(head, cfg.learner, num_envs=1, obs_dim=OBS_DIM, act_dim=ACT_DIM, capacity=BATCH,
                    device=torch.device("cpu"), seed=seed)
    finally:
        torch.set_default_dtype(torch.float32)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(PERTURB * torch.randn_like(p))
    batch = ReplayBatch(obs=torch.randn(BATCH, OBS_DIM, dtype=torch.float64),
                        actions=torch.empty(BATCH, ACT_DIM, dtype=torch.float64).uniform_(-0.99, 0.99),
                        rewards=torch.zeros(BATCH, dtype=torch.float64), next_obs=torch.zeros(BATCH, OBS_DIM,
                        dtype=torch.float64), dones=torch.zeros(BATCH, dtype=torch.float64))
    inputs = {f"init/actor/{k}": v for k, v in layout(head.denoiser).items()}
    inputs.update({f"init/ema/{k}": v for k, v in layout(algo.ema_base.denoiser).items()})
    inputs.update({"batch/observations": batch.obs.numpy(), "batch/actions": batch.actions.numpy()})

    draws: dict[str, list[Any]] = {"randint": [], "randn_like": []}
    randint, randn_like = torch.randint, torch.randn_like

    def recording(name: str, draw: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            value = draw(*args, **kwargs)
            draws[name].append(value.clone())
            return value
        return wrapped

    gradients: list[dict[int, Any]] = []
    algo.actor_optimizer.register_step_pre_hook(lambda opt, *_: gradients.append(
        {id(p): p.grad.detach().clone() for group in opt.param_groups for p in group["params"]}))
    torch.randint, torch.randn_like = recording("randint", randint), recording("randn_like", randn_like)
    try:
        loss = algo.base_step(batch)
    finally:
        torch.randint, torch.randn_like = randint, randn_like
    assert len(draws["randint"]) == len(draws["randn_like"]) == len(gradients) == 1, draws
    inputs.update({"draw/time": draws["randint"][0].numpy(), "draw/noise": draws["randn_like"][0].numpy()})
    results = {"info/actor_loss": loss.numpy()}
    results.update({f"grad/actor/{k}": v for k, v in layout(head.denoiser, gradients[0]).items()})
    results.update({f"after/actor/{k}": v for k, v in layout(head.denoiser).items()})
    results.update({f"after/ema/{k}": v for k, v in layout(algo.ema_base.denoiser).items()})
    return {"inputs": inputs, "results": results}


def jax_side(inputs_path: Path, output_path: Path, ref: Path) -> None:
    """Their ``update_actor`` on the inputs of ``inputs_path``; results to ``output_path`` (jax, flax, optax
    and the authors' modules only)."""
    import jax

    from shared import GymBox, shim_tfp_for_recent_jax, stub_gym_and_packages

    shim_tfp_for_recent_jax()
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import tensorflow_probability.substrates.jax  # noqa: F401  (their modules read it as an attribute)
    from flax.training.train_state import TrainState

    stub_gym_and_packages(ref, ("expo.agents", "expo.data"))
    from configs import expo_config
    from expo.agents.sac.expo_learner import EXPOLearner

    data = dict(np.load(inputs_path))
    kwargs = dict(expo_config.get_config())
    kwargs.pop("model_cls")
    flags = json.loads(str(data["flags"]))  # their scripts' flags, as expo.py's THEIR_FLAGS
    kwargs.update({k: tuple(v) if isinstance(v, list) else v for k, v in flags.items()})
    agent = EXPOLearner.create(0, GymBox(OBS_DIM), GymBox(ACT_DIM), **kwargs)
    actor, ema = unflatten(data, "init/actor", jnp.asarray), unflatten(data, "init/ema", jnp.asarray)
    assert sorted(flatten(actor, "")) == sorted(flatten(agent.actor.params, "")), "weight map"
    agent = agent.replace(actor=agent.actor.replace(params=actor, opt_state=agent.actor.tx.init(actor)),
                          target_actor=agent.target_actor.replace(params=ema))

    # genpol's draws in place of theirs: update_actor draws the timesteps, then the noise
    def randint(key: Any, shape: Any, minval: Any, maxval: Any, *args: Any, **kw: Any) -> Any:
        assert tuple(shape) == data["draw/time"].shape and (minval, maxval) == (0, kwargs["T"]), (shape, maxval)
        return jnp.asarray(data["draw/time"])

    def normal(key: Any, shape: Any = (), *args: Any, **kw: Any) -> Any:
        assert tuple(shape) == data["draw/noise"].shape, shape
        return jnp.asarray(data["draw/noise"])

    recorded: list[Any] = []
    apply_gradients = TrainState.apply_gradients

    def recording_apply_gradients(self: Any, *, grads: Any, **kw: Any) -> Any:
        recorded.append(grads)
        return apply_gradients(self, grads=grads, **kw)

    jax.random.randint, jax.random.normal, TrainState.apply_gradients = randint, normal, recording_apply_gradients
    batch = {"observations": jnp.asarray(data["batch/observations"]), "actions": jnp.asarray(data["batch/actions"])}
    new_agent, info = agent.update_actor(batch)
    assert len(recorded) == 1, len(recorded)
    out = {"info/actor_loss": np.asarray(info["actor_loss"])}
    out.update({f"grad/actor/{k}": np.asarray(v) for k, v in flatten(recorded[0], "").items()})
    out.update({f"after/actor/{k}": np.asarray(v) for k, v in flatten(new_agent.actor.params, "").items()})
    out.update({f"after/ema/{k}": np.asarray(v) for k, v in flatten(new_agent.target_actor.params, "").items()})
    out["meta"] = np.array(json.dumps({"dtypes": sorted({str(v.dtype) for v in out.values()}),
                                       "tx": "optax.adamw(cosine_decay_schedule(actor_lr, decay_steps))"}))
    np.savez(output_path, **out)


def compare(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray], init: dict[str, np.ndarray]) -> dict[str, Any]:
    def group(prefix: str, against: str | None = None) -> dict[str, float]:
        keys = [k for k in ours if k.startswith(prefix)]
        assert keys and set(keys) <= set(theirs), prefix
        if against is None:
            return worst([difference(ours[k], theirs[k]) for k in keys])
        return worst([difference(ours[k] - init[against + k[len(prefix):]], theirs[k] - init[against + k[len(prefix):]])
                      for k in keys])

    return {"imitation_loss": difference(ours["info/actor_loss"], theirs["info/actor_loss"]),
            "gradients": group("grad/actor/"), "parameters_after": group("after/actor/"),
            "ema_after": group("after/ema/"), "step (after - before)": group("after/actor/", "init/actor/")}


def base_rows(ref: Path, jax_python: Path, folder: Path, flags: dict[str, Any], row_fields: dict[str, Any]
              ) -> list[dict[str, Any]]:
    """The rows for ``parity_expo.json``: every option at the authors' value, then each departure alone.
    ``flags``: their scripts' flags on top of ``expo_config`` (expo.py's ``THEIR_FLAGS``)."""
    settings = [(MATCHED, "every base option at the authors' value"),
                ([MATCHED[0], "policy.imitation_reduction=mean"], "imitation_reduction=mean (genpol's)"),
                ([MATCHED[0]], "base_weight_decay=0 (genpol's Adam)")]
    rows, theirs, reference = [], None, None
    for overrides, label in settings:
        side = genpol_base_step(overrides)
        if reference is None:
            reference = side["inputs"]
            inputs_path, output_path = folder / "in_base.npz", folder / "out_base.npz"
            np.savez(inputs_path, **reference, flags=np.array(json.dumps(flags)))
            run_jax_side(jax_python, __file__, "--jax-side", str(inputs_path), str(output_path), "--ref", str(ref))
            theirs = dict(np.load(output_path))
        assert all(np.array_equal(side["inputs"][k], reference[k]) for k in reference), label
        rows.append({**row_fields, "file": "expo/agents/sac/expo_learner.py: EXPOLearner.update_actor, create "
                                          "(DDPM, vp_beta_schedule, optax.adamw); expo/networks/diffusion.py",
                     "setting": f"base imitation step, +experiment=expo {' '.join(overrides)}, {label}",
                     "overrides": overrides, "dtype": "float64",
                     "differences": compare(side["results"], theirs, reference)})
    return rows


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jax-side", nargs=2, type=Path, metavar=("IN", "OUT"), required=True)
    parser.add_argument("--ref", type=Path, required=True)
    args = parser.parse_args()
    jax_side(*args.jax_side, args.ref.resolve())

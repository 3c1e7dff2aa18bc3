"""Update-level parity of genpol's SAC in its RLPD configuration with its authors' code, on identical
inputs, in float64.

The authors' repository (ikostrikov/rlpd, JAX) is not part of genpol: take a snapshot anywhere and
point ``--ref`` at it. genpol is torch and theirs JAX, so the comparison runs in two processes of this
one file:

1. genpol's side (this interpreter, genpol's venv): ``SAC`` built from ``+experiment=rlpd`` takes one
   ``rlpd_round`` (``utd`` critic minibatches, each with its Polyak update, then one actor and one
   temperature step on the last minibatch) on a fixed batch. The harness only observes it: it records
   the actor's standard-normal noise (every ``torch.randn_like``), the target critics drawn for the
   subset-minimum (``_subset_heads``), the TD targets (``_td_target``) and every gradient as the
   optimizers see it. The starting weights, the batch and these draws go to an ``.npz``.
2. the authors' side (``--jax-python``, a venv with jax, flax, optax, tensorflow-probability and
   ml_collections; it imports neither torch nor genpol): ``python rlpd.py --jax-side IN OUT --ref PATH``
   builds their ``SACLearner`` from their ``configs/rlpd_config.py``, loads the same weights, and runs
   their jitted ``SACLearner.update(batch, utd_ratio)`` unchanged, with two draws replaced by genpol's:
   tfp's standard-normal sampler (``samplers.normal``, so their ``TanhTransformedDistribution`` and its
   bijector cache run as written) and ``jax.random.choice`` (inside their ``subsample_ensemble``). It
   records their gradients (``TrainState.apply_gradients``), the target critics' values and the
   next-action log-probs (``jax.debug.callback``) and writes losses, gradients and new parameters.
3. this interpreter compares.

Starting point: genpol's own initialization (xavier, RLPD's) with every parameter then moved by
N(0, 0.02^2), so no bias or LayerNorm parameter sits at its constant initial value and a layout error
would show; the target critics get their own perturbation (targets differ from the online critics);
alpha starts at 0.5 (not 1, so that a term missing its alpha would show). The batch: 256 x utd
transitions, observations N(0, 1), actions U(-0.99, 0.99), rewards N(0, 1), 20% terminal.

Reported per row: critic loss (last minibatch), actor loss, temperature loss, entropy, the TD target
of every minibatch, every gradient (critic of every minibatch, actor, temperature), and every
parameter after the round (actor, critics, target critics after the soft updates, temperature), as
the largest absolute and relative (to the largest magnitude of the authors' tensor) difference; the
same for the step itself (parameters after minus before, the part Adam's learning rate scales down).

Rows, per utd (1, and RLPD's 20): genpol eager as configured (``learner.critic_layer_norm_eps`` at
flax's 1e-6, which ``+experiment=rlpd`` sets since this harness found the difference); eager at torch's
1e-5 (genpol's value before, the departure measured); and ``learner.compile=true`` (what the
experiment file runs), as configured. Settings matched by the config itself: 10 critics, subset-min 2, critic LayerNorm,
mean critic loss, mean-Q actor loss, target entropy -|A|/2, alpha-form temperature loss, entropy
backup, gamma 0.99, tau 0.005, one Adam rate 3e-4 (eps 1e-8 on both sides), no gradient clip.

    python3 -m venv /tmp/jaxvenv && /tmp/jaxvenv/bin/pip install "jax[cpu]" flax optax tensorflow-probability ml_collections
    python bench/parity/rlpd.py --ref /path/to/rlpd --jax-python /tmp/jaxvenv/bin/python

Writes ``bench/results/parity_rlpd.json`` (a list of rows: method, repository, commit, differences).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from shared import (GymBox, difference, flatten, reference_commit, run_jax_side, shim_tfp_for_recent_jax,
                    stub_gym_and_packages, unflatten, worst)

ROOT = Path(__file__).resolve().parent.parent.parent
OBS_DIM, ACT_DIM, BATCH = 11, 3, 256  # Hopper's sizes; RLPD's batch_size 256
ALPHA0, PERTURB, SEED = 0.5, 0.02, 0


# =========================================================================== genpol's side (torch)
def genpol_learner(utd: int, seed: int, overrides: list[str] = (), device: str = "cpu") -> Any:
    """genpol's ``SAC`` as ``+experiment=rlpd`` builds it on Hopper's sizes (plus ``overrides``), in the
    default dtype, on ``device``, for batches handed in directly (``learner.offline_ratio=0``, a buffer of
    one round). Also used by ``bench/authors_cost.py``."""
    import torch

    from genpol.api import compose_config
    from genpol.algorithms.sac import SAC
    from genpol.build import make_head
    from genpol.configure import validate

    cfg = validate(compose_config(["+experiment=rlpd", "env=hopper", "run_dir=/tmp/genpol_parity_rlpd_unused",
                                   f"learner.utd={utd}", "learner.offline_ratio=0",  # the batch is handed in
                                   f"learner.buffer_size={BATCH * utd}", *overrides]))
    torch.manual_seed(seed)
    head = make_head(cfg.policy, OBS_DIM, ACT_DIM).to(device)
    return SAC(head, cfg.learner, num_envs=1, obs_dim=OBS_DIM, act_dim=ACT_DIM, capacity=cfg.learner.buffer_size,
               device=torch.device(device), seed=seed)


def genpol_round(utd: int, layer_norm_eps: float | None, seed: int, compiled: bool = False) -> dict[str, Any]:
    """One genpol ``rlpd_round`` at ``+experiment=rlpd``, with its inputs, draws and results as numpy
    arrays in flax's layout. ``layer_norm_eps`` None keeps the configured epsilon (1e-6); a value
    replaces it on both ensembles. ``compiled``: with
    ``learner.compile=true`` (what the experiment file sets); the actor's noise and the TD targets are
    drawn and computed inside the compiled graphs there, so they are not recorded (the noise comes from
    the same generator in the same order as eager, ``fallback_random``: the eager run's record serves)."""
    import torch

    from genpol.storage.replay import ReplayBatch

    torch.set_default_dtype(torch.float64)  # every network, log_alpha and optimizer state in float64
    try:
        algo = genpol_learner(utd, seed, [f"learner.compile={str(compiled).lower()}"])
        head = algo.head
    finally:
        torch.set_default_dtype(torch.float32)
    if layer_norm_eps is not None:  # QEnsemble's constructor argument; the forward reads the attribute
        algo.critic.layer_norm_eps = algo.critic_target.layer_norm_eps = layer_norm_eps
    with torch.no_grad():
        for p in [*head.parameters(), *algo.critic.parameters()]:
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

    # observe (never alter) genpol's round: its draws, TD targets and gradients
    def sample(size: int) -> ReplayBatch:
        assert size == n, (size, n)
        return batch

    algo.sampler.sample = sample
    noises, subsets, targets = [], [], []
    randn_like = torch.randn_like

    def recording_randn_like(*args: Any, **kwargs: Any) -> torch.Tensor:
        noise = randn_like(*args, **kwargs)
        noises.append(noise.detach().clone())
        return noise

    subset_heads, td_target = algo._subset_heads, algo._td_target
    algo._subset_heads = lambda: subsets.append(subset_heads()) or subsets[-1]
    if not compiled:
        algo._td_target = lambda *args: targets.append(td_target(*args)) or targets[-1]
    gradients: dict[str, list[dict[int, torch.Tensor]]] = {"critic": [], "actor": [], "temp": []}
    for name, optimizer in (("critic", algo.critic_optimizer), ("actor", algo.actor_optimizer),
                            ("temp", algo.alpha_optimizer)):
        optimizer.register_step_pre_hook(lambda opt, *_, name=name: gradients[name].append(
            {id(p): p.grad.detach().clone() for group in opt.param_groups for p in group["params"]}))
    if not compiled:
        torch.randn_like = recording_randn_like
    try:
        named = algo.rlpd_round()
    finally:
        torch.randn_like = randn_like
    assert len(noises) == (0 if compiled else utd + 1) and len(subsets) == utd, (len(noises), len(subsets))

    out = {"utd": np.array(utd), "alpha0": np.array(ALPHA0)}
    out.update({f"init/{k}": v for k, v in before.items()})
    out.update({"batch/observations": batch.obs.numpy(), "batch/actions": batch.actions.numpy(),
                "batch/rewards": batch.rewards.numpy(), "batch/masks": (1 - batch.dones).numpy(),
                "batch/next_observations": batch.next_obs.numpy()})
    # tfp draws the [B, A] noise of MultivariateNormalDiag as [A, B]: hand it over transposed
    out.update({f"draw/normal/{i}": noise.numpy().T.copy() for i, noise in enumerate(noises)})
    out.update({f"draw/subset/{i}": heads.numpy().astype(np.int64) for i, heads in enumerate(subsets)})
    results = {f"after/{k}": v for k, v in flax_layout(algo).items()}
    for name, steps in gradients.items():
        for i, step in enumerate(steps):
            results.update({f"grad/{name}/{i}/{k}": v for k, v in flax_layout(algo, step, name).items()})
    results.update({f"target_q/{i}": t.numpy() for i, t in enumerate(targets)})
    results.update({"info/critic_loss": named["value"].numpy(), "info/actor_loss": named["policy"].numpy(),
                    "info/temperature_loss": named["temperature"].numpy(), "info/entropy": named["entropy"].numpy()})
    return {"inputs": out, "results": results}


def flax_layout(algo: Any, gradients: dict[int, Any] | None = None, only: str | None = None) -> dict[str, np.ndarray]:
    """genpol's parameters (or, with ``gradients`` {id(parameter): gradient}, their gradients) as flat
    ``<network>/<flax path>`` arrays in the layout of the authors' flax parameters: Dense kernels
    ``[in, out]`` (``[E, in, out]`` in the vmapped ensemble), biases ``[out]`` (``[E, out]``)."""
    head = algo.head
    linear = {"MLP_0/Dense_0": head.latent_pi[0], "MLP_0/Dense_1": head.latent_pi[2],
              "OutputDenseMean": head.mu, "OutputDenseLogStd": head.log_std}
    pairs: list[tuple[str, Any, Any]] = []  # (key, parameter, to flax layout)
    for path, layer in linear.items():
        pairs += [(f"actor/{path}/kernel", layer.weight, lambda t: t.T), (f"actor/{path}/bias", layer.bias, None)]
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
def their_learner(ref: Path, obs_dim: int, act_dim: int, x64: bool = True, overrides: dict[str, Any] | None = None,
                  seed: int = 0) -> tuple[Any, dict[str, Any]]:
    """Their ``SACLearner.create(seed, ...)`` at ``configs/rlpd_config.py``'s defaults (as train_finetuning.py
    passes them) updated with ``overrides`` (e.g. ``{"hidden_dims": [256, 256], "num_qs": 10}``), and those
    keyword arguments. Imports jax, flax, tfp and the authors' modules (never torch or genpol); ``x64``:
    float64 arrays (the parity harness), else jax's float32. Also used by ``bench/authors_cost.py`` and
    ``bench/run_reference_rlpd.py``."""
    import jax

    shim_tfp_for_recent_jax()
    jax.config.update("jax_enable_x64", x64)
    import tensorflow_probability.substrates.jax  # noqa: F401  (their modules read it as an attribute)

    # their sac_learner imports gym only for a type annotation, rlpd.data.dataset for gym.utils.seeding;
    # rlpd.agents' and rlpd.data's __init__ import the pixel agents and replay buffers, not needed here
    stub_gym_and_packages(ref, ("rlpd.agents", "rlpd.data"))
    from configs import rlpd_config
    from rlpd.agents.sac.sac_learner import SACLearner

    kwargs = dict(rlpd_config.get_config())  # their defaults, as train_finetuning.py passes them
    kwargs.pop("model_cls")
    unknown = set(overrides or {}) - set(kwargs)
    if unknown:
        raise KeyError(f"not in their rlpd_config: {sorted(unknown)}")
    kwargs.update({key: tuple(value) if isinstance(value, list) else value for key, value in (overrides or {}).items()})
    return SACLearner.create(seed, GymBox(obs_dim), GymBox(act_dim), **kwargs), kwargs


def jax_side(inputs_path: Path, output_path: Path, ref: Path) -> None:
    """Their ``SACLearner.update`` on the inputs of ``inputs_path``; results to ``output_path``.
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

    agent, kwargs = their_learner(ref, data["batch/observations"].shape[1], data["batch/actions"].shape[1])
    from rlpd.distributions.tanh_transformed import TanhTransformedDistribution
    init_check = {key: float(np.abs(np.asarray(value)).max())
                  for key, value in flatten(agent.critic.params, "critic").items() if key.endswith("/bias")}
    actor, critic, target, temp = tree("init/actor"), tree("init/critic"), tree("init/target"), tree("init/temp")
    agent = agent.replace(actor=agent.actor.replace(params=actor, opt_state=agent.actor.tx.init(actor)),
                          critic=agent.critic.replace(params=critic, opt_state=agent.critic.tx.init(critic)),
                          target_critic=agent.target_critic.replace(params=target),
                          temp=agent.temp.replace(params=temp, opt_state=agent.temp.tx.init(temp)))

    # genpol's draws in place of theirs, in the order their traced update asks for them
    draws = {"normal": 0, "choice": 0}

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

    samplers.normal = normal
    jax.random.choice = choice

    # observe their gradients, target-critic values and log-probs from inside the jitted update
    recorded: dict[str, list[Any]] = {"grads": [], "next_qs": [], "log_probs": []}

    def record(name: str, value: Any) -> None:
        jax.debug.callback(lambda v: recorded[name].append(jax.tree_util.tree_map(np.asarray, v)), value,
                           ordered=True)

    apply_gradients = TrainState.apply_gradients

    def recording_apply_gradients(self: Any, *, grads: Any, **kw: Any) -> Any:
        record("grads", grads)
        return apply_gradients(self, grads=grads, **kw)

    TrainState.apply_gradients = recording_apply_gradients
    log_prob = TanhTransformedDistribution.log_prob

    def recording_log_prob(self: Any, *args: Any, **kw: Any) -> Any:
        value = log_prob(self, *args, **kw)
        record("log_probs", value)
        return value

    TanhTransformedDistribution.log_prob = recording_log_prob
    target_apply = agent.target_critic.apply_fn

    def recording_target_apply(*args: Any, **kw: Any) -> Any:
        value = target_apply(*args, **kw)
        record("next_qs", value)
        return value

    agent = agent.replace(target_critic=agent.target_critic.replace(apply_fn=recording_target_apply))
    batch = {k.split("/", 1)[1]: jnp.asarray(v) for k, v in data.items() if k.startswith("batch/")}
    new_agent, info = agent.update(batch, utd)
    jax.block_until_ready(new_agent)
    jax.effects_barrier()
    assert draws == {"normal": utd + 1, "choice": utd}, draws
    assert len(recorded["grads"]) == utd + 2 and len(recorded["next_qs"]) == utd, {
        k: len(v) for k, v in recorded.items()}

    out: dict[str, np.ndarray] = {}
    for name, params in (("actor", new_agent.actor.params), ("critic", new_agent.critic.params),
                         ("target", new_agent.target_critic.params), ("temp", new_agent.temp.params)):
        out.update({f"after/{k}": v for k, v in flatten(params, name).items()})
    counts = {"actor": 0, "critic": 0, "temp": 0}
    for grads in recorded["grads"]:
        kind = "actor" if "MLP_0" in grads else "critic" if "VmapStateActionValue_0" in grads else "temp"
        out.update({f"grad/{kind}/{counts[kind]}/{k}": v for k, v in flatten(grads, "").items()})
        counts[kind] += 1
    # their TD target, in update_critic's own expression, from the values their update computed
    temperature = np.exp(data["init/temp/log_temp"])
    discount = kwargs["discount"]
    for i, (next_qs, next_log_probs) in enumerate(zip(recorded["next_qs"], recorded["log_probs"][:utd])):
        rows = slice(BATCH * i, BATCH * (i + 1))
        rewards, masks = data["batch/rewards"][rows], data["batch/masks"][rows]
        target_q = rewards + discount * masks * next_qs.min(axis=0)
        target_q -= discount * masks * temperature * next_log_probs
        out[f"target_q/{i}"] = target_q
    out.update({f"info/{k}": np.asarray(v) for k, v in info.items()})
    meta = {"versions": {m: __import__(m).__version__ for m in ("jax", "flax", "optax", "numpy")},
            "tfp": tensorflow_probability.substrates.jax.__version__,
            "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in kwargs.items()},
            "their_init_bias_max": max(init_check.values()), "dtypes": sorted({str(v.dtype) for v in out.values()})}
    out["meta"] = np.array(json.dumps(meta))
    np.savez(output_path, **out)


# =========================================================================== the comparison
def compare(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray], init: dict[str, np.ndarray]
            ) -> dict[str, Any]:
    assert set(k for k in ours if not k.startswith("info/")) <= set(theirs), \
        sorted(set(ours) - set(theirs))

    def group(prefix: str, against: dict[str, np.ndarray] | None = None) -> dict[str, float]:
        keys = [k for k in ours if k.startswith(prefix)]
        assert keys, prefix
        if against is None:
            return worst([difference(ours[k], theirs[k]) for k in keys])
        # the step: after minus before (init keys lack the "after/" prefix)
        return worst([difference(ours[k] - against["init/" + k[6:]], theirs[k] - against["init/" + k[6:]])
                      for k in keys])

    infos = {"critic_loss": "critic_loss", "actor_loss": "actor_loss", "temperature_loss": "temperature_loss",
             "entropy": "entropy"}
    return {
        "losses": {name: difference(ours[f"info/{name}"], theirs[f"info/{key}"]) for name, key in infos.items()},
        "target_q": group("target_q/") if any(k.startswith("target_q/") for k in ours) else "not recorded",
        "gradients": {"critic (every minibatch)": group("grad/critic/"), "actor": group("grad/actor/"),
                      "temperature": group("grad/temp/")},
        "parameters_after": {name: group(f"after/{name}/") for name in ("actor", "critic", "target", "temp")},
        "step (after - before)": {name: group(f"after/{name}/", init) for name in ("actor", "critic", "target", "temp")},
    }


def run_jax(inputs: dict[str, np.ndarray], args: argparse.Namespace, folder: Path) -> dict[str, np.ndarray]:
    inputs_path, output_path = folder / f"in_utd{int(inputs['utd'])}.npz", folder / f"out_utd{int(inputs['utd'])}.npz"
    np.savez(inputs_path, **inputs)
    run_jax_side(args.jax_python, __file__, "--jax-side", str(inputs_path), str(output_path), "--ref", str(args.ref))
    return dict(np.load(output_path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", type=Path, required=True, help="a snapshot of ikostrikov/rlpd")
    parser.add_argument("--jax-python", type=Path, default=Path("/tmp/jaxvenv/bin/python"),
                        help="a Python with jax, flax, optax, tensorflow-probability, ml_collections")
    parser.add_argument("--jax-side", nargs=2, type=Path, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--utd", type=int, nargs="+", default=[1, 20], help="critic minibatches per round")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--eager-only", action="store_true", help="skip the learner.compile=true rows")
    args = parser.parse_args()
    if args.jax_side:
        jax_side(*args.jax_side, args.ref.resolve())
        return

    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT / "bench"))  # bench/common (this script lives one folder down)
    from common import date_stamp, machine, write_results

    ref = args.ref.resolve()
    commit = reference_commit(ref)
    settings = [(None, False, "eager, as configured (learner.critic_layer_norm_eps=1e-6, flax's)"),
                (1e-5, False, "eager, learner.critic_layer_norm_eps=1e-5 (torch's; genpol before 2026-12-02)")]
    if not args.eager_only:
        settings.append((None, True, "learner.compile=true (the experiment's), as configured"))
    rows, their_results = [], {}
    with tempfile.TemporaryDirectory(prefix="parity_rlpd_") as folder:
        for utd in args.utd:
            for eps, compiled, label in settings:
                side = genpol_round(utd, eps, args.seed, compiled)
                if utd not in their_results:
                    their_results[utd] = (side["inputs"], run_jax(side["inputs"], args, Path(folder)))
                inputs, theirs = their_results[utd]
                assert all(np.array_equal(inputs[k], side["inputs"][k]) for k in side["inputs"]), "inputs differ by setting"
                meta = json.loads(str(theirs["meta"]))
                rows.append({"method": "rlpd", "repository": "ikostrikov/rlpd", "commit": commit,
                             "file": "rlpd/agents/sac/sac_learner.py: SACLearner.update, update_critic, "
                                     "update_actor, update_temperature (configs/rlpd_config.py)",
                             "setting": f"+experiment=rlpd, utd {utd}, {label}", "dtype": "float64", "date": date_stamp(),
                             "machine": machine(), "reference_stack": {**meta["versions"], "tfp": meta["tfp"]},
                             "reference_config": meta["config"],
                             # their create()'s critic biases and LayerNorm shifts start at 0, as genpol's xavier
                             "reference_init_critic_bias_max_abs": meta["their_init_bias_max"],
                             "differences": compare(side["results"], theirs, inputs)})
    write_results("parity_rlpd.json", rows)  # a list of rows, as every bench/results/parity*.json
    print("| setting | critic / actor / temp loss rel | entropy rel | target Q rel | gradients rel (critic, actor, temp) "
          "| parameters after rel (actor, critic, target, temp) | step rel (actor, critic, target, temp) |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        d = row["differences"]
        losses = " / ".join(f"{d['losses'][k]['rel']:.1e}" for k in ("critic_loss", "actor_loss", "temperature_loss"))
        grads = ", ".join(f"{v['rel']:.1e}" for v in d["gradients"].values())
        after = ", ".join(f"{v['rel']:.1e}" for v in d["parameters_after"].values())
        step = ", ".join(f"{v['rel']:.1e}" for v in d["step (after - before)"].values())
        target = d["target_q"] if isinstance(d["target_q"], str) else f"{d['target_q']['rel']:.1e}"
        print(f"| {row['setting']} | {losses} | {d['losses']['entropy']['rel']:.1e} | {target} "
              f"| {grads} | {after} | {step} |")


if __name__ == "__main__":
    main()

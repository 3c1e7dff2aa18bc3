"""Update-level parity of genpol's MaxEntDP with its authors' code, on identical inputs, in float64.

The authors' repository (diffusionyes/MaxEntDP, JAX, on jaxrl5) is not part of genpol: take a snapshot
anywhere and point ``--ref`` at it. As ``bench/parity/rlpd.py`` (whose shims and weight layout this file
follows), the comparison runs in two processes of this one file:

1. genpol's side (this interpreter, genpol's venv, float64): ``MaxEntDP`` built from
   ``+experiment=maxentdp env=hopper`` (temperature 0.05, their Hopper value) takes one ``gradient_step``
   on a fixed batch: the critic step (next actions from the DDPM sampler, the log-prob estimate, the TD
   target, one Adam step of both critics, Polyak) and then the QNE actor step. The harness only observes
   it: every ``torch.randn`` / ``torch.rand`` (the sampler's x_T and per-step noise, the log-prob noise,
   QNE's t, xi and the candidate uniforms), the truncated normals e_k genpol makes of the uniforms, the
   TD target, the next actions and their chain, the QNE target, and every gradient as Adam sees it.
   It then runs the sampler and the log-prob estimate alone on the batch (fresh draws).
2. the authors' side (``--jax-python``: jax, flax, optax, ml_collections; no torch, no genpol):
   ``python maxentdp.py --jax-side IN OUT --ref PATH`` builds their ``MaxEntropyLearner`` from
   ``examples/states/configs/max_entropy_learner_config.py`` (their defaults: T 20, K 500, N 50,
   T_lp 20; ``decay_steps`` 2e6 of ``create``), loads the same weights and runs their ``update``
   (``update_q`` then ``update_actor``), ``ddpm_sampler`` and ``calc_log_prob`` unchanged, under
   ``jax.disable_jit()``: their sampler draws its per-step noise inside a ``lax.scan``, whose body jit
   traces once, so only an eager run can take a different fed draw at each step (the ops are theirs;
   eager and jitted differ by XLA's fusion only). ``jax.random.normal`` / ``uniform`` /
   ``truncated_normal`` return genpol's draws in call order: x_T, the T - 1 noises (their last step's
   draw, multiplied by 0, is fed zeros), the log-prob noise [B, N, T_lp, A] (the same layout as genpol's),
   t, xi, the e_k, and zeros for their NaN fallback's normal (a clipped zero is genpol's own fallback).
3. this interpreter compares.

Rows: (a) genpol's e_k fed to their update: everything downstream of the candidate sampler; (b) their
``jax.random.truncated_normal`` itself on genpol's uniforms (its ``uniform`` returns ``a + u (b - a)``,
jax's map of a [0, 1) variate; the rest of JAX's sampler, erf and erf_inv, runs as written; where genpol
mirrors an interval above 0 its draw at u is the (1 - u)-quantile, so JAX gets 1 - u there): the two
candidate samplers compared, and theirs once more in float32, as the authors train; (c) as (a) with genpol's schedule tables rounded to float32, as a head built
in float32 holds them (built in float64, as here, it holds float64 tables; before this harness it kept
float32 ones, and sampling failed: fixed, ``tests/test_maxentdp.py``).

Starting point: genpol's initialization with every parameter moved by N(0, 0.02^2) (so no bias sits at
0 and a layout error would show), the target critics their own perturbation. Batch: 256 transitions,
observations N(0, 1), actions U(-0.99, 0.99), rewards N(0, 1), 20% terminal. Differences are the
largest absolute and relative (to the largest |theirs|) over each group; ``--quick`` runs small sizes
(a smoke run; nothing written).

    python bench/parity/maxentdp.py --ref /path/to/MaxEntDP --jax-python /tmp/jaxvenv/bin/python

Writes ``bench/results/parity_maxentdp.json`` (a list of rows: method, repository, commit, differences).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from shared import (GymBox, difference, flatten, reference_commit, run_jax_side, stub_gym_and_packages, unflatten,
                    worst)

ROOT = Path(__file__).resolve().parent.parent.parent
OBS_DIM, ACT_DIM, BATCH = 11, 3, 256  # Hopper's sizes; their batch_size 256
PERTURB, SEED = 0.02, 0
LR_STEPS = [0, 1, 1000, 500_000, 1_000_000, 1_999_999, 2_000_000, 3_000_000]  # the actor's schedule, checked


# =========================================================================== genpol's side (torch)
def build_genpol(seed: int, overrides: list[str]) -> Any:
    """genpol's MaxEntDP at ``+experiment=maxentdp env=hopper`` in float64, weights perturbed."""
    import torch

    from genpol.algorithms.maxentdp import MaxEntDP
    from genpol.api import compose_config
    from genpol.build import make_head
    from genpol.configure import validate

    cfg = validate(compose_config(["+experiment=maxentdp", "env=hopper", "run_dir=/tmp/genpol_parity_maxentdp_unused",
                                   f"learner.buffer_size={BATCH}", *overrides]))
    torch.manual_seed(seed)
    head = make_head(cfg.policy, OBS_DIM, ACT_DIM)
    algo = MaxEntDP(head, cfg.learner, temperature=cfg.learner.temperature(cfg.env.id), num_envs=1, obs_dim=OBS_DIM,
                    act_dim=ACT_DIM, capacity=BATCH, device=torch.device("cpu"), seed=seed)
    with torch.no_grad():
        for p in [*head.parameters(), *algo.critic.parameters()]:
            p.add_(PERTURB * torch.randn_like(p))
        for target, online in zip(algo.critic_target.parameters(), algo.critic.parameters()):
            target.copy_(online + PERTURB * torch.randn_like(online))
    return algo


def float32_tables(head: Any) -> None:
    """The head's schedule tables rounded to float32 (what a head built in float32 holds, and what it held
    in float64 too before 2026-12: row (c) measures what that rounding moves)."""
    for name in ("alpha_bar", "log_snr", "beta", "coef_x0", "coef_xt"):
        setattr(head, name, getattr(head, name).float().double())


class Recorder:
    """Every ``torch.randn`` and ``torch.rand`` while active, in call order (observed, never altered)."""

    def __init__(self) -> None:
        import torch

        self.torch, self.draws = torch, []
        self.originals = (torch.randn, torch.rand)

    def __enter__(self) -> Recorder:
        def recording(original: Any) -> Any:
            def draw(*args: Any, **kwargs: Any) -> Any:
                value = original(*args, **kwargs)
                self.draws.append(value.detach().clone())
                return value
            return draw

        self.torch.randn, self.torch.rand = (recording(f) for f in self.originals)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.torch.randn, self.torch.rand = self.originals


def genpol_side(seed: int, tables64: bool, overrides: list[str]) -> dict[str, Any]:
    """One genpol gradient step, the sampler and the log-prob estimate alone; inputs, draws and results."""
    import torch

    import genpol.algorithms.maxentdp as maxentdp_module
    from genpol.heads.vp_schedule import T_MAX, T_MIN, alpha_bar, estimate_log_prob
    from genpol.storage.replay import ReplayBatch

    torch.set_default_dtype(torch.float64)  # networks, optimizer state and every draw in float64
    algo = build_genpol(seed, overrides)
    head, cfg = algo.head, algo.cfg
    if not tables64:
        float32_tables(head)
    batch = ReplayBatch(obs=torch.randn(BATCH, OBS_DIM), actions=torch.empty(BATCH, ACT_DIM).uniform_(-0.99, 0.99),
                        rewards=torch.randn(BATCH), next_obs=torch.randn(BATCH, OBS_DIM),
                        dones=(torch.rand(BATCH) < 0.2).double())
    inputs = {f"init/{k}": v for k, v in flax_layout(algo).items()}
    inputs.update({"batch/observations": batch.obs.numpy(), "batch/actions": batch.actions.numpy(),
                   "batch/rewards": batch.rewards.numpy(), "batch/masks": (1 - batch.dones).numpy(),
                   "batch/next_observations": batch.next_obs.numpy(), "temp": np.array(float(algo.alpha)),
                   "sizes": np.array([head.num_steps, cfg.candidates, cfg.log_prob_draws, cfg.log_prob_levels])})

    # observe genpol's step: chains, TD target, QNE problem and candidates, predicted noise, gradients
    seen: dict[str, Any] = {}

    def keep(name: str, function: Any) -> Any:  # the first call's result (later calls: the sampler alone)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            out = function(*args, **kwargs)
            seen.setdefault(name, out)
            return out
        return wrapped

    algo._td_target = keep("target_q", algo._td_target)
    head._run_chain = keep("next_chain", head._run_chain)
    algo.critic_step = keep("critic", algo.critic_step)
    algo.qne_target = keep("qne", algo.qne_target)
    qne_candidates, noise_matching_loss = maxentdp_module.qne_candidates, maxentdp_module.noise_matching_loss
    maxentdp_module.qne_candidates = keep("candidates", qne_candidates)
    maxentdp_module.noise_matching_loss = lambda predicted, target: (
        seen.setdefault("eps_pred", predicted.detach().clone()), noise_matching_loss(predicted, target))[1]
    gradients: dict[str, dict[int, torch.Tensor]] = {}

    def keep_gradients(name: str) -> Any:
        def hook(optimizer: Any, *_: Any) -> None:
            gradients[name] = {id(p): p.grad.detach().clone() for group in optimizer.param_groups
                               for p in group["params"]}
        return hook

    algo.critic_optimizer.register_step_pre_hook(keep_gradients("critic"))
    algo.actor_optimizer.register_step_pre_hook(keep_gradients("score"))
    lr = algo.actor_lr()
    try:
        with Recorder() as step_draws:
            named = algo.gradient_step(batch)
    finally:
        maxentdp_module.qne_candidates, maxentdp_module.noise_matching_loss = qne_candidates, noise_matching_loss
    x_t, *step_noise, log_prob_noise, t, xi, uniforms = step_draws.draws
    assert len(step_noise) == head.num_steps - 1 and uniforms.shape == (BATCH, cfg.candidates, ACT_DIM)
    zeros = torch.zeros(BATCH, ACT_DIM)
    normals = [x_t, *step_noise, zeros, log_prob_noise, xi, torch.zeros(BATCH, cfg.candidates, ACT_DIM)]
    inputs.update({f"draw/normal/{i}": v.numpy() for i, v in enumerate(normals)})
    inputs.update({"draw/t": t.numpy(), "draw/uniform": uniforms.numpy(), "draw/tnormal": seen["candidates"][1].numpy()})

    # the sampler and the log-prob estimate alone, at the starting weights
    with torch.no_grad():
        start = build_genpol(seed, overrides)
        if not tables64:
            float32_tables(start.head)
        with Recorder() as sampler_draws:
            action, chain = start.head._run_chain(batch.obs, None)
        noise = torch.randn(BATCH, cfg.log_prob_draws, cfg.log_prob_levels, ACT_DIM)
        log_prob = estimate_log_prob(start.head.predict_noise, batch.obs, batch.actions, cfg.log_prob_levels,
                                     cfg.log_prob_draws, start.head.clip_denoised, cfg.chunk_rows, noise=noise)
    inputs.update({f"sampler/normal/{i}": v.numpy() for i, v in enumerate([*sampler_draws.draws, zeros])})
    inputs["log_prob/noise"] = noise.numpy()

    qne = seen["qne"]
    # the candidates' truncation bounds, as qne_candidates forms them (their NaN fallback clips to them)
    abar = alpha_bar(T_MIN + (T_MAX - T_MIN) * t).unsqueeze(-1).unsqueeze(1)
    scale, center = ((1 - abar) / abar).sqrt(), qne["noisy"].unsqueeze(1) / abar.sqrt()
    bounds = [((edge - center) / scale).expand_as(uniforms) for edge in (-1, 1)]
    results = {"target_q": seen["target_q"], "next_chain": seen["next_chain"][1][:, :-1].transpose(0, 1),
               "next_actions": seen["next_chain"][0], "next_log_prob": algo._next_log_prob,
               "critic_loss": named["value"], "q": seen["critic"]["q"], "eps_estimation": qne["target"],
               "eps_pred": seen["eps_pred"], "actor_loss": named["policy"], "tnormal": seen["candidates"][1],
               "tnormal_lower": bounds[0], "tnormal_upper": bounds[1],
               "sampler/chain": chain[:, :-1].transpose(0, 1), "sampler/action": action, "log_prob": log_prob}
    results = {k: v.detach().numpy() for k, v in results.items()}
    results.update({f"after/{k}": v for k, v in flax_layout(algo).items()})
    for name, step in gradients.items():
        results.update({f"grad/{k}": v for k, v in flax_layout(algo, step).items() if k.startswith(name)})
    results["actor_lr"] = np.array([lr] + [maxentdp_module.cosine_lr(cfg.lr, s, cfg.actor_lr_decay_steps)
                                           for s in LR_STEPS])
    torch.set_default_dtype(torch.float32)
    return {"inputs": inputs, "results": results}


def flax_layout(algo: Any, gradients: dict[int, Any] | None = None) -> dict[str, np.ndarray]:
    """genpol's parameters (or, with ``gradients`` {id(parameter): gradient}, their gradients) as flat
    ``<network>/<flax path>`` arrays of the authors' trees. The weight map: their ``DDPM`` is
    ``FourierFeatures_0`` (kernel [32, 1], genpol's ``time_features.kernel``), ``MLP_0`` (the time MLP,
    genpol's ``time_mlp``) and ``MLP_1`` (the body on [a_t, s, cond], genpol's ``body``); Dense kernels are
    ``[in, out]`` (torch's Linear weight transposed). Their two critics are separate ``StateActionValue``s
    (``MLP_0/Dense_0..1``, ``Dense_0``); genpol's ensemble holds them as slices 0 and 1 of ``[E, in, out]``."""
    network = algo.head.network
    pairs: list[tuple[str, Any, Any]] = [("score/FourierFeatures_0/kernel", network.time_features.kernel, None)]
    for flax_name, sequential in (("MLP_0", network.time_mlp), ("MLP_1", network.body)):
        linears = [layer for layer in sequential if hasattr(layer, "weight")]
        for k, layer in enumerate(linears):
            pairs += [(f"score/{flax_name}/Dense_{k}/kernel", layer.weight, lambda w: w.T),
                      (f"score/{flax_name}/Dense_{k}/bias", layer.bias, None)]
    for prefix, ensemble in (("critic", algo.critic), ("target", algo.critic_target)):
        hidden = len(ensemble.hidden_sizes)
        for i in range(ensemble.num_qs):
            for k, (weight, bias) in enumerate(zip(ensemble.weights, ensemble.biases)):
                path = f"{prefix}_{i + 1}/" + (f"MLP_0/Dense_{k}" if k < hidden else "Dense_0")
                pairs += [(f"{path}/kernel", weight, lambda w, i=i: w[i]),
                          (f"{path}/bias", bias, lambda b, i=i: b[i, 0])]
    flat = {}
    for key, parameter, transform in pairs:
        tensor = parameter.detach() if gradients is None else gradients.get(id(parameter))
        if tensor is not None:
            flat[key] = (transform(tensor) if transform else tensor).numpy().copy()
    return flat


# =========================================================================== the authors' side (JAX)
def jax_side(inputs_path: Path, output_path: Path, ref: Path) -> None:
    """Their update, sampler and log-prob estimate on the inputs of ``inputs_path``, twice (genpol's e_k
    fed, then JAX's truncated normal on the same uniforms); results to ``output_path``."""
    import types

    import jax

    jax.config.update("jax_enable_x64", True)
    import jax._src.random.core as jax_random_core
    import jax.numpy as jnp
    import optax
    from flax.training.train_state import TrainState

    # their learner imports gym for annotations (gym.spaces) and jaxrl5.data.dataset for gym.utils.seeding;
    # the package __init__s import every agent and replay buffer: not needed here
    stub_gym_and_packages(ref, ("jaxrl5", "jaxrl5.agents", "jaxrl5.agents.score_matching", "jaxrl5.data"))
    sys.modules["gym"].spaces = types.SimpleNamespace(Space=object, Box=object)
    sys.path.insert(0, str(ref / "examples" / "states"))
    import jaxrl5.agents.score_matching.max_entropy_learner as learner_module
    from configs import max_entropy_learner_config
    from jaxrl5.agents.score_matching.max_entropy_learner import MaxEntropyLearner
    from jaxrl5.networks.diffusion import ddpm_sampler

    data = dict(np.load(inputs_path))
    T, K, N, T_lp = (int(v) for v in data["sizes"])
    kwargs = dict(max_entropy_learner_config.get_config())
    kwargs.pop("model_cls")
    kwargs.update(temp=float(data["temp"]), T=T, score_samples_num=K, samples_num=N, T_log_prob=T_lp)
    agent = MaxEntropyLearner.create(0, GymBox(OBS_DIM), GymBox(ACT_DIM), **kwargs)
    params = {name: unflatten(data, f"init/{name}", jnp.asarray) for name in
              ("score", "critic_1", "critic_2", "target_1", "target_2")}
    for name, state in (("score", agent.score_model), ("critic_1", agent.critic_1)):  # the weight map is theirs
        assert sorted(flatten(params[name], "")) == sorted(flatten(state.params, "")), name
    agent = agent.replace(
        score_model=agent.score_model.replace(params=params["score"], opt_state=agent.score_model.tx.init(params["score"])),
        critic_1=agent.critic_1.replace(params=params["critic_1"], opt_state=agent.critic_1.tx.init(params["critic_1"])),
        critic_2=agent.critic_2.replace(params=params["critic_2"], opt_state=agent.critic_2.tx.init(params["critic_2"])),
        target_critic_1=agent.target_critic_1.replace(params=params["target_1"]),
        target_critic_2=agent.target_critic_2.replace(params=params["target_2"]))

    # genpol's draws in place of theirs, in call order
    queue: dict[str, list[np.ndarray]] = {}

    def pop(kind: str, shape: Any) -> Any:
        value = queue[kind].pop(0)
        assert tuple(int(s) for s in shape) == value.shape, (kind, shape, value.shape)
        return jnp.asarray(value)

    def normal(key: Any, shape: Any = (), dtype: Any = None, **kw: Any) -> Any:
        return pop("normal", shape)

    def uniform(key: Any, shape: Any = (), dtype: Any = None, minval: Any = 0.0, maxval: Any = 1.0, **kw: Any) -> Any:
        # genpol's [0, 1) variate through jax's own map (genpol's t: T_MIN + (T_MAX - T_MIN) u, the same bits);
        # shape [B]: update_actor's t, else the one inside jax.random.truncated_normal
        u = pop("t" if len(shape) == 1 else "uniform", shape)
        return jnp.maximum(minval, u * (maxval - minval) + minval)

    recorded: dict[str, list[Any]] = {}

    def record(name: str, value: Any) -> None:
        jax.debug.callback(lambda v: recorded.setdefault(name, []).append(np.asarray(v)), value)

    truncated_normal, core_uniform = jax.random.truncated_normal, jax_random_core.uniform

    def jax_truncated_normal(key: Any, lower: Any, upper: Any, shape: Any = None, dtype: Any = None) -> Any:
        # genpol draws an interval above 0 as the mirror of its image below 0, so its draw at u is the
        # (1 - u)-quantile there: the same quantile is jax's at 1 - u (exact: u is a multiple of 2^-53)
        fed = queue["uniform"][0]
        queue["uniform"][0] = np.where(np.broadcast_to(np.asarray(lower), fed.shape) > 0, 1 - fed, fed)
        queue["uniform32"] = [queue["uniform"][0].astype(np.float32)]
        # its own uniform fed only here (flax's parameter shape checks draw through jax's internals too)
        jax_random_core.uniform = uniform
        try:
            value = truncated_normal(key, lower, upper, shape, dtype)
        finally:
            jax_random_core.uniform = core_uniform
        record("tnormal", value)
        # the same draws as their float32 training makes them (genpol draws in float64, then casts)
        jax_random_core.uniform = uniform
        queue["uniform"].insert(0, queue["uniform32"].pop(0))
        try:
            value32 = truncated_normal(key, lower.astype(jnp.float32), upper.astype(jnp.float32), shape, jnp.float32)
        finally:
            jax_random_core.uniform = core_uniform
        record("tnormal_float32", value32)
        return value

    def fed_truncated_normal(key: Any, lower: Any, upper: Any, shape: Any = None, dtype: Any = None) -> Any:
        value = pop("tnormal", shape)
        recorded.setdefault("tnormal", []).append(np.asarray(value))
        return value

    def recording_tensorstats(tensor: Any, prefix: Any = None) -> Any:  # their metrics: the tensors themselves
        record(prefix, tensor)
        return tensorstats(tensor, prefix)

    def recording_sampler(apply_fn: Any, actor_params: Any, T: Any, rng: Any, act_dim: Any, observations: Any,
                          clip_sampler: Any, training: bool = False) -> Any:
        def apply(variables: Any, s: Any, a: Any, level: Any, training: bool = False) -> Any:
            record("chain", a)  # the state each step starts from: x_T ... x_1
            return apply_fn(variables, s, a, level, training=training)
        action, rng = ddpm_sampler(apply, actor_params, T, rng, act_dim, observations, clip_sampler, training)
        record("next_actions", action)
        return action, rng

    def recording_calc_log_prob(self: Any, observations: Any, actions: Any) -> Any:
        out = calc_log_prob(self, observations, actions)
        record("log_prob", out[0])
        return out

    def recording_apply_gradients(self: Any, *, grads: Any, **kw: Any) -> Any:
        recorded.setdefault("grads", []).append(jax.tree_util.tree_map(np.asarray, grads))
        return apply_gradients(self, grads=grads, **kw)

    tensorstats, calc_log_prob, apply_gradients = (learner_module.tensorstats, MaxEntropyLearner.calc_log_prob,
                                                   TrainState.apply_gradients)
    learner_module.tensorstats, learner_module.ddpm_sampler = recording_tensorstats, recording_sampler
    MaxEntropyLearner.calc_log_prob, TrainState.apply_gradients = recording_calc_log_prob, recording_apply_gradients
    jax.random.normal, jax.random.uniform = normal, uniform

    out: dict[str, np.ndarray] = {}
    batch = {k.split("/", 1)[1]: jnp.asarray(v) for k, v in data.items() if k.startswith("batch/")}
    for mode, sampler in (("fed", fed_truncated_normal), ("jax", jax_truncated_normal)):
        queue.update(normal=[data[f"draw/normal/{i}"] for i in range(T + 4)], t=[data["draw/t"]],
                     uniform=[data["draw/uniform"]], tnormal=[data["draw/tnormal"]])
        recorded.clear()
        jax.random.truncated_normal = sampler
        with jax.disable_jit():
            new_agent, _ = agent.update(batch)
        jax.effects_barrier()
        assert not queue["normal"] and not queue["t"], queue.keys()
        critic_loss = sum(losses.mean() for losses in recorded["c_loss"])
        mine = {"target_q": recorded["target_q"][0], "next_chain": np.stack(recorded["chain"]),
                "next_actions": recorded["next_actions"][0], "next_log_prob": recorded["log_prob"][0],
                "critic_loss": np.array(critic_loss), "q": np.stack(recorded["q"]),
                "eps_estimation": recorded["eps_estimation"][0], "eps_pred": recorded["eps_pred"][0],
                "actor_loss": recorded["actor_loss"][0].mean(), "tnormal": recorded["tnormal"][0],
                "tnormal_float32": recorded.get("tnormal_float32", [np.zeros(0)])[0]}
        for name, params in (("critic_1", new_agent.critic_1.params), ("critic_2", new_agent.critic_2.params),
                             ("target_1", new_agent.target_critic_1.params),
                             ("target_2", new_agent.target_critic_2.params), ("score", new_agent.score_model.params)):
            mine.update({f"after/{k}": v for k, v in flatten(params, name).items()})
        for name, grads in zip(("critic_1", "critic_2", "score"), recorded["grads"]):
            mine.update({f"grad/{k}": v for k, v in flatten(grads, name).items()})
        out.update({f"{mode}/{k}": np.asarray(v) for k, v in mine.items()})

    # the sampler and the log-prob estimate alone, at the starting weights
    recorded.clear()
    queue.update(normal=[data[f"sampler/normal/{i}"] for i in range(T + 1)] + [data["log_prob/noise"]])
    with jax.disable_jit():
        learner_module.ddpm_sampler(agent.score_model.apply_fn, agent.score_model.params, T, agent.rng, ACT_DIM,
                                    batch["observations"], agent.clip_sampler)
        agent.calc_log_prob(batch["observations"], batch["actions"])
    jax.effects_barrier()
    out.update({"sampler/chain": np.stack(recorded["chain"]), "sampler/action": recorded["next_actions"][0],
                "log_prob": recorded["log_prob"][0]})
    schedule = optax.cosine_decay_schedule(kwargs["actor_lr"], int(2e6))  # create()'s decay_steps default
    out["actor_lr"] = np.array([float(schedule(0))] + [float(schedule(s)) for s in LR_STEPS])
    meta = {"versions": {m: __import__(m).__version__ for m in ("jax", "flax", "optax", "numpy")},
            "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in kwargs.items()},
            "dtypes": sorted({str(v.dtype) for v in out.values()})}
    out["meta"] = np.array(json.dumps(meta))
    np.savez(output_path, **out)


# =========================================================================== the comparison
def compare(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray], init: dict[str, np.ndarray], mode: str
            ) -> dict[str, Any]:
    def one(key: str) -> dict[str, float]:
        return difference(ours[key], theirs[f"{mode}/{key}" if f"{mode}/{key}" in theirs else key])

    def group(prefix: str) -> dict[str, float]:
        keys = [k for k in ours if k.startswith(prefix)]
        assert keys and all(f"{mode}/{k}" in theirs for k in keys), prefix
        return worst([one(k) for k in keys])

    def step(prefix: str) -> dict[str, float]:  # after - before: the part Adam's learning rate scales down
        keys = [k for k in ours if k.startswith(prefix)]
        return worst([difference(ours[k] - init["init/" + k[6:]], theirs[f"{mode}/{k}"] - init["init/" + k[6:]])
                      for k in keys])

    def candidates(theirs_e: np.ndarray) -> dict[str, Any]:
        nan = np.isnan(theirs_e)
        # their fallback: a clipped normal; the fed one is 0 (genpol's rule), so the bound nearer 0
        theirs_e = np.where(nan, np.clip(0.0, *bounds), theirs_e)
        apart = np.abs(ours["tnormal"] - theirs_e) > 1e-9 * np.maximum(1.0, np.abs(theirs_e))
        return {**difference(ours["tnormal"], theirs_e), "their_nan": int(nan.sum()),
                "apart_beyond_1e-9": int(apart.sum()), "count": int(nan.size)}

    bounds = (ours["tnormal_lower"], ours["tnormal_upper"])
    return {
        "critic": {"next_actions (sampler)": one("next_actions"), "next_chain x_T..x_1": one("next_chain"),
                   "next_log_prob": one("next_log_prob"), "target_q": one("target_q"),
                   "critic_loss (sum of both)": one("critic_loss"), "q": one("q"),
                   "gradients": group("grad/critic"), "critics_after_adam": group("after/critic"),
                   "critics_step": step("after/critic"), "targets_after_polyak": group("after/target")},
        "actor": {"truncated_normals_e_k": candidates(theirs[f"{mode}/tnormal"]),
                  **({"truncated_normals_e_k, theirs in float32": candidates(theirs[f"{mode}/tnormal_float32"])}
                     if mode == "jax" else {}),
                  "qne_target_eps": one("eps_estimation"), "eps_pred": one("eps_pred"), "loss": one("actor_loss"),
                  "gradients": group("grad/score"), "eps_net_after_adam": group("after/score"),
                  "eps_net_step": step("after/score")},
        "sampler_alone": {"chain x_T..x_1": one("sampler/chain"), "action": one("sampler/action")},
        "log_prob_alone": one("log_prob"),
        "actor_lr (first step; then optax vs genpol at steps " + ", ".join(map(str, LR_STEPS)) + ")": one("actor_lr"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", type=Path, required=True, help="a snapshot of diffusionyes/MaxEntDP")
    parser.add_argument("--jax-python", type=Path, default=Path("/tmp/jaxvenv/bin/python"),
                        help="a Python with jax, flax, optax and ml_collections")
    parser.add_argument("--jax-side", nargs=2, type=Path, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--quick", action="store_true", help="small sizes (T 5, K 16, N 4, T_lp 5): a smoke run")
    args = parser.parse_args()
    if args.jax_side:
        jax_side(*args.jax_side, args.ref.resolve())
        return

    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT / "bench"))
    from common import date_stamp, machine, write_results

    ref = args.ref.resolve()
    sizes = (["policy.sampling_steps=5", "learner.candidates=16", "learner.log_prob_draws=4",
              "learner.log_prob_levels=5"] if args.quick else [])
    sides = {"float64 tables": genpol_side(args.seed, True, sizes),
             "float32 tables": genpol_side(args.seed, False, sizes)}
    inputs = sides["float64 tables"]["inputs"]
    for key, value in sides["float32 tables"]["inputs"].items():  # same weights and draws, tables aside
        assert np.array_equal(value, inputs[key]), key
    with tempfile.TemporaryDirectory(prefix="parity_maxentdp_") as folder:
        inputs_path, output_path = Path(folder) / "in.npz", Path(folder) / "out.npz"
        np.savez(inputs_path, **inputs)
        run_jax_side(args.jax_python, __file__, "--jax-side", str(inputs_path), str(output_path), "--ref", str(ref))
        theirs = dict(np.load(output_path))
    meta = json.loads(str(theirs["meta"]))
    settings = [("float64 tables", "fed", "(a) genpol's truncated normals e_k fed to their update; float64 tables"),
                ("float64 tables", "jax", "(b) their jax.random.truncated_normal on genpol's uniforms; float64 tables"),
                ("float32 tables", "fed", "(c) genpol's schedule tables rounded to float32; e_k fed")]
    rows = [{"method": "maxentdp", "repository": "diffusionyes/MaxEntDP", "commit": reference_commit(ref),
             "file": "jaxrl5/agents/score_matching/max_entropy_learner.py: MaxEntropyLearner.update (update_q, "
                     "update_actor, calc_log_prob); jaxrl5/networks/diffusion.py: DDPM, FourierFeatures, ddpm_sampler; "
                     "jaxrl5/networks/dpm_solver_jax.py: NoiseScheduleVP('cosine')",
             "setting": f"+experiment=maxentdp env=hopper (temperature 0.05) {' '.join(sizes)}, {label}", "dtype": "float64",
             "date": date_stamp(), "machine": machine(), "reference_stack": meta["versions"],
             "reference_config": meta["config"], "differences": compare(sides[side]["results"], theirs, inputs, mode)}
            for side, mode, label in settings]
    if not args.quick:
        write_results("parity_maxentdp.json", rows)
    for row in rows:
        print(f"\n## {row['setting']}")
        for part, entries in row["differences"].items():
            entries = entries if "abs" not in entries else {"": entries}
            for name, d in entries.items():
                extra = {k: v for k, v in d.items() if k not in ("abs", "rel")}
                print(f"{part:>14.14} {name:<28} abs {d['abs']:.1e}  rel {d['rel']:.1e}  {extra or ''}")


if __name__ == "__main__":
    main()

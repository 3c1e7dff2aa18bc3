"""Update-level parity of genpol's GoRL (``LatentDecoderHead``, the PPO loss on its encoder, the
decoder's flow-matching fit) with its authors' code, on identical inputs, in float64.

The authors' repository (bennidict23/GoRL, JAX) is not part of genpol: take a snapshot anywhere and
point ``--ref`` at it. The reference is ``src/flow_policy/encoder_ppo.py`` (``EncoderState.init``,
``sample_z``, ``_step_minibatch`` and the ``_compute_ppo_loss`` it differentiates),
``src/flow_policy/networks.py`` (``gaussian_policy_fwd``: scale softplus(.) + 1e-3 clipped to
[1e-3, 10]) and ``src/flow_policy/decoder_fm.py`` (``DecoderFMState.init``, ``compute_cfm_loss``,
``train_step``, ``sample_action_from_z``), run as written. genpol is torch and theirs JAX, so the
comparison runs in processes of this one file:

1. the authors' side, ``init`` (``--jax-python``: jax, optax, jax_dataclasses; never torch or genpol):
   their ``EncoderState.init`` draws the encoder (obs -> 4 x 32 SiLU -> 2 z_dim) and the critic
   (obs -> 5 x 256 SiLU -> 1), their ``DecoderFMState.init`` two velocity networks (obs + a + 8 ->
   4 x 64 SiLU -> a): the frozen decoder and a fresh one to train; lecun-uniform, zero biases.
2. genpol's side (this interpreter): ``+experiment=gorl`` builds the head, critic and PPO updater in
   float64, with stage 0's clip range and grad-norm limit (``stages.stage_updater``) and latent L2
   (``pipeline.latent_l2_first``), as ``pipeline=gorl`` does. Every weight is moved by N(0, 0.02^2)
   and copied in (kernels transposed; the decoder's output layer negated: their network predicts
   u = eps - a in their tau convention, genpol's v = a - noise; negation is exact). The old (rollout)
   encoder is the current one moved by a further N(0, 0.05^2), so ratios leave the clip range.
   ``LatentDecoderHead.sample_pre_tanh`` runs on the old encoder and the frozen decoder with its draw
   (the encoder's standard normal) replaced by the harness's: the batch is its record (z, log_prob,
   mean, log_std) and its pre-tanh action. Observations N(0, 1), advantages 0.3 + 2 N(0, 1), value
   targets 20 N(0, 1) (so the joint gradient norm exceeds the clip). genpol then takes one
   ``MinibatchUpdater.eager_step`` on the encoder and critic, and one step of the decoder fit's loop
   body (``DecoderTraining._fit``: ``head.decoder_loss(...).mean()``, torch Adam, lr 3e-4) on a fresh
   decoder with the (t, noise) draws replaced, onto the batch's pre-tanh actions.
3. the authors' side, ``update``: ``sample_z`` on the old encoder with ``jax.random.normal`` replaced
   (the sampler is compared too); ``_step_minibatch`` on genpol's batch (T = 1) with their Adam
   (``optax.scale_by_adam``, learning rate by hand) recording the gradients it sees; the decoder's
   ``train_step`` (``optax.adam(3e-4)``, recorded) with ``jax.random.normal`` / ``uniform`` replaced by
   tau = 1 - t and the same noise; ``sample_action_from_z`` from the batch's z on the frozen decoder,
   then tanh (their rollout's ``apply_tanh_in_rollout``).
4. this interpreter compares.

Shims (their package imports mujoco_playground, mujoco and brax): the package ``flow_policy`` is
registered without running its ``__init__`` (which imports every module), ``mujoco_playground.MjxEnv``
is a placeholder type, ``flow_policy.rollouts`` a stand-in holding ``TransitionStruct`` (the same
fields) and ``compute_gae``, which returns the harness's (returns, advantages): their update
recomputes GAE from the current critic in every minibatch loss (as FPO's, a departure); here both
sides get the same advantages and value targets. Observation statistics: the encoder's are the
identity (genpol stores normalized observations); the decoder divides by ``std + 1e-8``, so the
matched rows give it std = 1 - 1e-8 (rounded so that std + 1e-8 == 1.0 exactly) and one row std = 1.

Settings matched by options (genpol's defaults differ; each has a row with genpol's value):
``learner.adam_eps=1e-8`` (optax), ``learner.grad_clip=joint`` (their one global norm over encoder and
critic), ``learner.advantage_std=population`` (their ``jnp.std``; genpol's unbiased std has a row),
``learner.grad_clip_eps=1e-8`` (their clip factor max_norm / (norm + 1e-8); torch's ``clip_grad_norm_``,
genpol's default, adds 1e-6: a row), and ``policy.time_embedding=fpo``, the decoder's time embedding
[cos(2^k tau), sin(2^k tau)] of tau = 1 - t (genpol's default [sin(2^k pi t), cos(2^k pi t)] has a row).
The last three were harness patches before they became options (2026-12-02); no patch is left on
genpol's side.

    /tmp/jaxvenv/bin/pip install jax optax jax_dataclasses
    python bench/parity/gorl.py --ref /path/to/GoRL --jax-python /tmp/jaxvenv/bin/python

Writes ``bench/results/parity_gorl.json`` (a list of rows: method, repository, commit, differences).
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
OBS_DIM, ACT_DIM, BATCH, PAIRS, STEPS, EMBED = 17, 6, 512, 8, 10, 8  # CheetahRun's sizes; experiment's minibatch
PERTURB, OLD_PERTURB, RETURN_SCALE, SEED = 0.02, 0.05, 20.0, 0
LR, DECODER_LR, ENT_COEF, VF_COEF = 1e-3, 3e-4, 1e-2, 0.25
NETWORKS = {"encoder": 5, "value": 6, "decoder": 5, "fresh": 5}
# their run_gorl_fm.py stage settings (clip, grad-norm limit, z_regularization), stage 0 and later
STAGES = {"stage0": (0.15, 0.5, 5e-4), "later": (0.3, 1.0, 1e-3)}
MATCHED = ["learner.adam_eps=1e-8", "learner.grad_clip=joint", "learner.advantage_std=population",
           "learner.grad_clip_eps=1e-8"]


# =========================================================================== the authors' side (JAX)
def import_theirs(ref: Path) -> Any:
    """Their ``encoder_ppo``, ``decoder_fm``, ``math_utils``, with shims for what the update does not use."""
    import types
    from typing import Generic, TypeVar

    import jax_dataclasses as jdc
    from jax import Array

    mjp = types.ModuleType("mujoco_playground")
    mjp.MjxEnv = type("MjxEnv", (), {})
    sys.modules["mujoco_playground"] = mjp
    package = types.ModuleType("flow_policy")  # without its __init__, which imports every module
    package.__path__ = [str(ref / "src" / "flow_policy")]
    sys.modules["flow_policy"] = package

    rollouts = types.ModuleType("flow_policy.rollouts")
    action_info = TypeVar("action_info")

    @jdc.pytree_dataclass
    class TransitionStruct(Generic[action_info]):  # their fields; rollouts.py needs mujoco
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
    package.rollouts = rollouts
    from flow_policy import decoder_fm, encoder_ppo, math_utils

    return encoder_ppo, decoder_fm, math_utils


class Env:
    """What their ``EncoderState`` reads of an environment."""

    observation_size, action_size = OBS_DIM, ACT_DIM


def their_encoder_config(encoder_ppo: Any, stage: str) -> Any:
    clip, grad_norm, z_reg = STAGES[stage]
    return encoder_ppo.EncoderConfig(
        action_repeat=1, batch_size=BATCH, discounting=0.99, entropy_cost=ENT_COEF, episode_length=1000,
        learning_rate=LR, normalize_observations=True, num_envs=BATCH, num_evals=1, num_minibatches=1,
        num_timesteps=BATCH, num_updates_per_batch=1, reward_scaling=1.0, unroll_length=1, z_dim=ACT_DIM,
        clipping_epsilon=clip, value_loss_coeff=VF_COEF, z_regularization=z_reg, max_grad_norm=grad_norm)


def jax_init(output_path: Path, ref: Path, seed: int) -> None:
    """Their initial encoder, critic and two decoders to ``output_path``."""
    import jax

    jax.config.update("jax_enable_x64", True)
    encoder_ppo, decoder_fm, _ = import_theirs(ref)
    key0, key1, key2 = jax.random.split(jax.random.PRNGKey(seed), 3)
    state = encoder_ppo.EncoderState.init(key0, Env(), their_encoder_config(encoder_ppo, "stage0"))
    frozen = decoder_fm.DecoderFMState.init(key1, OBS_DIM, ACT_DIM, decoder_fm.DecoderFMConfig())
    fresh = decoder_fm.DecoderFMState.init(key2, OBS_DIM, ACT_DIM, decoder_fm.DecoderFMConfig())
    out = {}
    for name, layers in (("encoder", state.params.policy), ("value", state.params.value),
                         ("decoder", frozen.params), ("fresh", fresh.params)):
        assert len(layers) == NETWORKS[name], (name, len(layers))
        for i, (kernel, bias) in enumerate(layers):
            out[f"{name}/{i}/w"], out[f"{name}/{i}/b"] = np.asarray(kernel), np.asarray(bias)
    np.savez(output_path, **out)


def jax_update(inputs_path: Path, output_path: Path, ref: Path) -> None:
    """Their sampler, encoder step (per stage), decoder step and decoding; results to ``output_path``."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import optax

    encoder_ppo, decoder_fm, math_utils = import_theirs(ref)
    data = dict(np.load(inputs_path))

    def layers(prefix: str, name: str) -> tuple[tuple[Any, Any], ...]:
        return tuple((jnp.asarray(data[f"{prefix}/{name}/{i}/w"]), jnp.asarray(data[f"{prefix}/{name}/{i}/b"]))
                     for i in range(NETWORKS[name]))

    def stats(std: float) -> Any:
        return math_utils.RunningStats(count=jnp.asarray(1.0), mean=jnp.zeros(OBS_DIM), var_sum=jnp.ones(OBS_DIM),
                                       std=jnp.full(OBS_DIM, std))

    recorded: list[Any] = []

    def recording(transform: Any) -> Any:
        def update(grads: Any, state: Any, params: Any = None) -> Any:
            recorded.append(jax.tree_util.tree_map(np.asarray, grads))
            return transform.update(grads, state, params)

        return optax.GradientTransformation(transform.init, update)

    out: dict[str, np.ndarray] = {}
    obs = jnp.asarray(data["batch/obs"])
    current = encoder_ppo.ActorCriticParams(policy=layers("current", "encoder"), value=layers("current", "value"))
    old = encoder_ppo.ActorCriticParams(policy=layers("old", "encoder"), value=layers("current", "value"))

    def encoder_state(stage: str, params: Any) -> Any:
        opt = recording(optax.scale_by_adam())  # their optimizer (eps 1e-8), learning rate applied by hand
        return encoder_ppo.EncoderState(env=Env(), config=their_encoder_config(encoder_ppo, stage), params=params,
                                        obs_stats=stats(1.0), opt=opt, opt_state=opt.init(params),
                                        prng=jax.random.PRNGKey(0), steps=jnp.zeros((), jnp.int32))

    # the sampler: sample_z on the old encoder, the harness's standard normal in place of jax.random's
    normal = jax.random.normal

    def given_normal(key: Any, shape: Any = (), dtype: Any = float, *args: Any) -> Any:
        assert tuple(shape) == (BATCH, ACT_DIM), shape
        return jnp.asarray(data["draw/z_noise"])

    jax.random.normal = given_normal
    try:
        z, info = encoder_state("stage0", old).sample_z(obs, jax.random.PRNGKey(1), deterministic=False)
    finally:
        jax.random.normal = normal
    out["sampler/z"], out["sampler/log_prob"] = np.asarray(z), np.asarray(info.log_prob)
    out["sampler/mean"], out["sampler/std"] = np.asarray(info.mean), np.asarray(info.std)

    # (a) one encoder minibatch step per stage setting, on genpol's batch
    transitions = encoder_ppo.rollouts.TransitionStruct(
        obs=obs[None], next_obs=obs[None], action=jnp.asarray(data["batch/z"])[None],
        action_info=encoder_ppo.EncoderActionInfo(log_prob=jnp.asarray(data["batch/log_prob"])[None],
                                                  mean=jnp.asarray(data["batch/mean"])[None],
                                                  std=jnp.exp(jnp.asarray(data["batch/log_std"]))[None]),
        reward=jnp.zeros((1, BATCH)), truncation=jnp.zeros((1, BATCH)), discount=jnp.ones((1, BATCH)))
    encoder_ppo.rollouts.gae = (jnp.asarray(data["batch/returns"])[None], jnp.asarray(data["batch/advantages"])[None])
    for stage in STAGES:
        state = encoder_state(stage, current)
        z_dist = encoder_ppo.networks.gaussian_policy_fwd(current.policy, obs)
        new_log_prob = jnp.sum(z_dist.log_prob(transitions.action[0]), axis=-1)  # as in _compute_ppo_loss
        _, metrics = state._compute_ppo_loss(transitions, jax.random.PRNGKey(2))
        recorded.clear()
        new_state, step_metrics = state._step_minibatch(transitions, jax.random.PRNGKey(2))
        assert len(recorded) == 1
        metrics = {**metrics, **step_metrics}
        out[f"{stage}/log_prob"] = np.asarray(new_log_prob)
        out[f"{stage}/ratio"] = np.asarray(jnp.exp(new_log_prob - transitions.action_info.log_prob[0]))
        for key in ("policy_loss", "v_loss", "entropy", "entropy_loss", "z_reg_loss", "total_loss",
                    "clipped_ratio_mean", "grad_norm_before_clip", "grad_norm"):
            out[f"{stage}/{key}"] = np.asarray(metrics[key])
        for name, tree, new_tree in (("encoder", recorded[0].policy, new_state.params.policy),
                                     ("value", recorded[0].value, new_state.params.value)):
            for i in range(NETWORKS[name]):
                out[f"{stage}/grad/{name}/{i}/w"], out[f"{stage}/grad/{name}/{i}/b"] = tree[i]
                kernel, bias = new_tree[i]
                out[f"{stage}/after/{name}/{i}/w"], out[f"{stage}/after/{name}/{i}/b"] = np.asarray(kernel), np.asarray(bias)

    # (b) one decoder train_step (their jax.random draws replaced), and (c) decoding from z
    one = 1.0 - 1e-8
    while one + 1e-8 != 1.0:  # std with std + 1e-8 == 1.0 exactly: their (obs - 0) / (std + 1e-8) is obs
        one = np.nextafter(one, 2.0 if one + 1e-8 < 1.0 else 0.0)
    out["decoder_std"] = np.asarray(one)
    actions = jnp.asarray(data["batch/pre_tanh"])
    eps, tau = jnp.asarray(data["draw/cfm_noise"]), jnp.asarray(1.0 - data["draw/cfm_t"])[..., None]
    uniform = jax.random.uniform

    def given_draw(key: Any, shape: Any = (), dtype: Any = float, *args: Any, **kwargs: Any) -> Any:
        assert tuple(shape) in ((BATCH, PAIRS, ACT_DIM), (BATCH, PAIRS, 1)), shape
        return eps if tuple(shape) == (BATCH, PAIRS, ACT_DIM) else tau

    for label, std in (("matched", one), ("std1", 1.0)):
        config = decoder_fm.DecoderFMConfig(learning_rate=DECODER_LR, batch_size=BATCH, n_samples_per_action=PAIRS)
        opt = recording(optax.adam(DECODER_LR))
        fresh = layers("current", "fresh")
        state = decoder_fm.DecoderFMState(config=config, params=fresh, obs_stats=stats(std), opt=opt,
                                          opt_state=opt.init(fresh), prng=jax.random.PRNGKey(3),
                                          steps=jnp.zeros((), jnp.int32))
        obs_norm = (obs - state.obs_stats.mean) / (state.obs_stats.std + 1e-8)  # as train_step
        out[f"cfm_{label}/per_sample"] = np.asarray(state.compute_cfm_loss(obs_norm, actions, eps, tau))
        recorded.clear()
        jax.random.normal, jax.random.uniform = given_draw, given_draw
        try:
            new_state, metrics = state.train_step(obs, actions)
        finally:
            jax.random.normal, jax.random.uniform = normal, uniform
        assert len(recorded) == 1
        out[f"cfm_{label}/loss"] = np.asarray(metrics["loss"])
        for i in range(NETWORKS["fresh"]):
            out[f"cfm_{label}/grad/fresh/{i}/w"], out[f"cfm_{label}/grad/fresh/{i}/b"] = recorded[0][i]
            kernel, bias = new_state.params[i]
            out[f"cfm_{label}/after/fresh/{i}/w"], out[f"cfm_{label}/after/fresh/{i}/b"] = np.asarray(kernel), np.asarray(bias)
        frozen = decoder_fm.DecoderFMState(config=config, params=layers("current", "decoder"), obs_stats=stats(std),
                                           opt=opt, opt_state=None, prng=jax.random.PRNGKey(4),
                                           steps=jnp.zeros((), jnp.int32))
        pre_tanh = frozen.sample_action_from_z(obs, jnp.asarray(data["batch/z"]), jax.random.PRNGKey(5), deterministic=True)
        out[f"decode_{label}/pre_tanh"], out[f"decode_{label}/action"] = np.asarray(pre_tanh), np.asarray(jnp.tanh(pre_tanh))

    from importlib.metadata import version

    meta = {"versions": {m: version(m) for m in ("jax", "optax", "numpy", "jax_dataclasses")},
            "decoder_config": {k: v for k, v in vars(decoder_fm.DecoderFMConfig()).items()
                               if isinstance(v, (int, float, bool, str))},
            "encoder_config_defaults": {"gae_lambda": 0.95, "clipping_epsilon": 0.15, "value_loss_coeff": 0.25,
                                        "max_grad_norm": 0.5, "z_regularization": 0.0}}
    out["meta"] = np.array(json.dumps(meta))
    np.savez(output_path, **out)


# =========================================================================== genpol's side (torch)
def linears(module: Any) -> list[Any]:
    import torch

    return [layer for layer in module.modules() if isinstance(layer, torch.nn.Linear)]


def modules(head: Any, critic: Any, fresh: Any = None) -> dict[str, Any]:
    found = {"encoder": head.encoder, "value": critic.net, "decoder": head.decoder.net}
    if fresh is not None:
        found["fresh"] = fresh.net
    return found


def sign(name: str, i: int) -> float:
    """Their decoder predicts u = eps - a (tau convention), genpol's v = a - noise: the output layer is negated."""
    return -1.0 if name in ("decoder", "fresh") and i == NETWORKS[name] - 1 else 1.0


def load_weights(found: dict[str, Any], params: dict[str, np.ndarray], prefixes: dict[str, str]) -> None:
    import torch

    with torch.no_grad():
        for name, module in found.items():
            targets = linears(module)
            assert len(targets) == NETWORKS[name], (name, len(targets))
            for i, layer in enumerate(targets):
                layer.weight.copy_(sign(name, i) * torch.from_numpy(params[f"{prefixes[name]}/{name}/{i}/w"]).T)
                layer.bias.copy_(sign(name, i) * torch.from_numpy(params[f"{prefixes[name]}/{name}/{i}/b"]))


def their_layout(found: dict[str, Any], tensors: dict[int, Any] | None = None) -> dict[str, np.ndarray]:
    """genpol's parameters (or, with ``tensors`` {id(parameter): gradient}, their gradients) in the authors' layout."""
    out = {}
    for name, module in found.items():
        for i, layer in enumerate(linears(module)):
            for key, parameter in (("w", layer.weight), ("b", layer.bias)):
                if tensors is not None and id(parameter) not in tensors:
                    continue
                value = parameter.detach() if tensors is None else tensors[id(parameter)]
                value = sign(name, i) * (value.T if key == "w" else value)
                out[f"{name}/{i}/{key}"] = value.numpy().copy()
    return out


THEIR_EMBEDDING = "policy.time_embedding=fpo"  # GoRL's code embeds as FPO's: an option since 2026-12-02


def build(overrides: list[str], stage: int = 0) -> tuple[Any, Any, Any, Any]:
    """``+experiment=gorl``'s head, critic and stage ``stage``'s updater (clip, grad norm, latent L2), float64."""
    import torch

    from genpol.algorithms.registry import make_critic, make_updater
    from genpol.api import compose_config
    from genpol.build import make_head
    from genpol.configure import validate
    from genpol.pipelines.gorl.stages import stage_updater

    torch.set_default_dtype(torch.float64)
    try:
        cfg = validate(compose_config(["+experiment=gorl", "env=hopper", "run_dir=/tmp/genpol_parity_gorl_unused",
                                       *overrides]))
        cfg = stage_updater(cfg, stage)
        head = make_head(cfg.policy, OBS_DIM, ACT_DIM)
        head.latent_l2_coef = cfg.pipeline.latent_l2_later if stage else cfg.pipeline.latent_l2_first
        critic = make_critic(cfg.policy, OBS_DIM)
        updater = make_updater(cfg.learner, head, critic)
    finally:
        torch.set_default_dtype(torch.float32)
    return cfg, head, critic, updater


def genpol_inputs(init: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """Weights, draws and the batch (genpol's ``sample_pre_tanh`` on the old encoder and the frozen decoder)."""
    import torch

    from genpol.heads import latent

    rng = np.random.default_rng(seed)
    inputs: dict[str, np.ndarray] = {}
    for key, value in init.items():
        current = value + PERTURB * rng.standard_normal(value.shape)
        inputs[f"current/{key}"] = current
        if key.startswith("encoder/"):
            inputs[f"old/{key}"] = current + OLD_PERTURB * rng.standard_normal(value.shape)
    inputs["batch/obs"] = rng.standard_normal((BATCH, OBS_DIM))
    inputs["draw/z_noise"] = rng.standard_normal((BATCH, ACT_DIM))
    inputs["draw/cfm_t"] = rng.uniform(0.0, 1.0, (BATCH, PAIRS))
    inputs["draw/cfm_noise"] = rng.standard_normal((BATCH, PAIRS, ACT_DIM))
    inputs["batch/advantages"] = 0.3 + 2.0 * rng.standard_normal(BATCH)
    inputs["batch/returns"] = RETURN_SCALE * rng.standard_normal(BATCH)
    inputs["batch/old_values"] = rng.standard_normal(BATCH)  # unused: no value clip on either side

    _, head, critic, _ = build([*MATCHED, THEIR_EMBEDDING])
    found = modules(head, critic)
    load_weights(found, inputs, {"encoder": "old", "value": "current", "decoder": "current"})
    randn_like = torch.randn_like

    def given_randn_like(tensor: Any, **kwargs: Any) -> Any:
        assert tuple(tensor.shape) == (BATCH, ACT_DIM)
        return torch.from_numpy(inputs["draw/z_noise"])

    latent.torch.randn_like = given_randn_like
    try:
        with torch.no_grad():
            pre_tanh, record = head.sample_pre_tanh(torch.from_numpy(inputs["batch/obs"]))
    finally:
        latent.torch.randn_like = randn_like
    inputs["batch/pre_tanh"] = pre_tanh.numpy()
    for key in ("z", "log_prob", "mean", "log_std"):
        inputs[f"batch/{key}"] = record[key].numpy()
    return inputs


def genpol_encoder_step(inputs: dict[str, np.ndarray], overrides: list[str], stage: int) -> dict[str, np.ndarray]:
    """One ``eager_step`` of genpol's PPO updater on the encoder and critic; terms, gradients, parameters after."""
    import torch

    from genpol.storage.rollout import Batch

    cfg, head, critic, updater = build(overrides, stage)
    found = {k: v for k, v in modules(head, critic).items() if k != "decoder"}
    load_weights(found, inputs, {"encoder": "current", "value": "current"})
    obs = torch.from_numpy(inputs["batch/obs"])
    record = {key: torch.from_numpy(inputs[f"batch/{key}"]) for key in ("z", "log_prob", "mean", "log_std")}
    gradients: dict[int, torch.Tensor] = {}
    updater.optimizer.register_step_pre_hook(lambda opt, *_: gradients.update(
        {id(p): p.grad.detach().clone() for group in opt.param_groups for p in group["params"] if p.grad is not None}))
    with torch.no_grad():
        terms = head.log_ratio(obs, record)
        log_prob = terms.log_ratio.squeeze(-1) + record["log_prob"]
    with torch.no_grad():
        total, _ = updater.minibatch_loss(obs, record, torch.from_numpy(inputs["batch/advantages"]),
                                          torch.from_numpy(inputs["batch/returns"]),
                                          torch.from_numpy(inputs["batch/old_values"]))
    batch = Batch(obs=obs, record=record, advantages=torch.from_numpy(inputs["batch/advantages"]),
                  returns=torch.from_numpy(inputs["batch/returns"]), values=torch.from_numpy(inputs["batch/old_values"]))
    named = updater.eager_step(batch)
    out = {"log_prob": log_prob.numpy(), "ratio": terms.log_ratio.squeeze(-1).exp().numpy(),
           "policy_loss": named["policy"].numpy(),
           "v_loss": updater.loss.vf_coef * named["value"].numpy(),  # theirs after value_loss_coeff
           "entropy": named["entropy"].numpy(), "entropy_loss": -updater.loss.ent_coef * named["entropy"].numpy(),
           "z_reg_loss": (terms.aux_loss if terms.aux_loss is not None else torch.zeros(())).numpy(),
           "total_loss": total.numpy(), "clipped_ratio_mean": named["clipfrac"].numpy(),
           "settings": {"clip_range": updater.loss.clip_range, "max_grad_norm": updater.max_grad_norm,
                        "latent_l2_coef": head.latent_l2_coef, "vf_coef": updater.loss.vf_coef,
                        "ent_coef": updater.loss.ent_coef, "lr": updater.base_lr,
                        "adam_eps": updater.optimizer.defaults["eps"], "grad_clip": cfg.learner.grad_clip,
                        "grad_clip_eps": updater.clip_eps, "advantage_std": updater.loss.advantage_std}}
    out.update({f"grad/{k}": v for k, v in their_layout(found, gradients).items()})
    out.update({f"after/{k}": v for k, v in their_layout(found).items()})
    return out


def genpol_decoder(inputs: dict[str, np.ndarray], their_embedding: bool) -> dict[str, np.ndarray]:
    """(b) one step of ``DecoderTraining._fit``'s loop body on a fresh decoder, draws replaced; (c) decode + tanh."""
    import torch

    from genpol.heads import latent

    _, head, critic, _ = build([*MATCHED, THEIR_EMBEDDING] if their_embedding else MATCHED)
    torch.set_default_dtype(torch.float64)
    try:
        fresh = head.new_decoder()  # the head's spec carries policy.time_embedding
    finally:
        torch.set_default_dtype(torch.float32)
    found = {"decoder": head.decoder.net, "fresh": fresh.net}
    load_weights(found, inputs, {"decoder": "current", "fresh": "current"})
    obs, actions = torch.from_numpy(inputs["batch/obs"]), torch.from_numpy(inputs["batch/pre_tanh"])
    out: dict[str, Any] = {}
    with torch.no_grad():
        out["cfm/per_sample"] = head.decoder_error(obs, actions, torch.from_numpy(inputs["draw/cfm_t"]),
                                                   torch.from_numpy(inputs["draw/cfm_noise"]), fresh).numpy()
        pre_tanh = head.decode(obs, torch.from_numpy(inputs["batch/z"]))
    out["decode/pre_tanh"], out["decode/action"] = pre_tanh.numpy(), torch.tanh(pre_tanh).numpy()

    optimizer = torch.optim.Adam(fresh.parameters(), lr=DECODER_LR)  # as DecoderTraining._fit
    rand, randn = torch.rand, torch.randn
    latent.torch.rand = lambda *shape, **kw: torch.from_numpy(inputs["draw/cfm_t"])
    latent.torch.randn = lambda *shape, **kw: torch.from_numpy(inputs["draw/cfm_noise"])
    try:
        loss = head.decoder_loss(obs, actions, PAIRS, fresh).mean()  # the loop body of _fit
    finally:
        latent.torch.rand, latent.torch.randn = rand, randn
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    gradients = {id(p): p.grad.detach().clone() for p in fresh.parameters()}
    optimizer.step()
    out["cfm/loss"] = loss.detach().numpy()
    out.update({f"cfm/grad/{k}": v for k, v in their_layout({"fresh": fresh.net}, gradients).items()})
    out.update({f"cfm/after/{k}": v for k, v in their_layout({"fresh": fresh.net}).items()})
    return out


# =========================================================================== the comparison
def group(ours: dict[str, Any], theirs: dict[str, Any], ours_prefix: str, theirs_prefix: str, network: str,
          inputs: dict[str, np.ndarray] | None = None) -> dict[str, float]:
    keys = sorted(k[len(ours_prefix) + 1:] for k in ours if k.startswith(f"{ours_prefix}/{network}/"))
    assert keys, (ours_prefix, network)
    if inputs is None:
        return worst([difference(ours[f"{ours_prefix}/{k}"], theirs[f"{theirs_prefix}/{k}"]) for k in keys])
    return worst([difference(ours[f"{ours_prefix}/{k}"] - inputs[f"current/{k}"],
                             theirs[f"{theirs_prefix}/{k}"] - inputs[f"current/{k}"]) for k in keys])


def compare_encoder(ours: dict[str, Any], theirs: dict[str, Any], stage: str,
                    inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    d: dict[str, Any] = {key: difference(ours[key], theirs[f"{stage}/{key}"])
                         for key in ("log_prob", "ratio", "policy_loss", "v_loss", "entropy", "entropy_loss",
                                     "z_reg_loss", "total_loss")}
    d["clipfrac"] = {"genpol": float(ours["clipped_ratio_mean"]), "theirs": float(theirs[f"{stage}/clipped_ratio_mean"])}
    d["their grad norm (before / after clip)"] = [float(theirs[f"{stage}/grad_norm_before_clip"]),
                                                  float(theirs[f"{stage}/grad_norm"])]
    d["gradients"] = {n: group(ours, theirs, "grad", f"{stage}/grad", n) for n in ("encoder", "value")}
    d["parameters_after"] = {n: group(ours, theirs, "after", f"{stage}/after", n) for n in ("encoder", "value")}
    d["step (after - before)"] = {n: group(ours, theirs, "after", f"{stage}/after", n, inputs) for n in ("encoder", "value")}
    return d


def compare_decoder(ours: dict[str, Any], theirs: dict[str, Any], label: str,
                    inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    return {"cfm per sample": difference(ours["cfm/per_sample"], theirs[f"cfm_{label}/per_sample"]),
            "cfm loss": difference(ours["cfm/loss"], theirs[f"cfm_{label}/loss"]),
            "gradients": group(ours, theirs, "cfm/grad", f"cfm_{label}/grad", "fresh"),
            "parameters_after": group(ours, theirs, "cfm/after", f"cfm_{label}/after", "fresh"),
            "step (after - before)": group(ours, theirs, "cfm/after", f"cfm_{label}/after", "fresh", inputs),
            "decode pre-tanh g(s, z)": difference(ours["decode/pre_tanh"], theirs[f"decode_{label}/pre_tanh"]),
            "decode action tanh(g)": difference(ours["decode/action"], theirs[f"decode_{label}/action"])}


def run_jax(args: argparse.Namespace, *command: str) -> None:
    run_jax_side(args.jax_python, __file__, *command, "--ref", str(args.ref))


ENCODER_SETTINGS = [
    # (label, overrides beyond +experiment=gorl, genpol stage, their stage)
    ("encoder stage 0, matched: options (learner.advantage_std=population, learner.grad_clip_eps=1e-8 among them)",
     MATCHED, 0, "stage0"),
    ("encoder stage 0, matched, learner.grad_clip_eps=1e-6 (genpol's default: torch's clip_grad_norm_)",
     [*MATCHED, "learner.grad_clip_eps=1e-6"], 0, "stage0"),
    ("encoder stage 0, matched, learner.advantage_std=unbiased (genpol's default)",
     [*MATCHED, "learner.advantage_std=unbiased"], 0, "stage0"),
    ("encoder stage 0, matched, learner.adam_eps=1e-5 (genpol's default)", [*MATCHED, "learner.adam_eps=1e-5"], 0,
     "stage0"),
    ("encoder stage 0, matched, learner.grad_clip=per_network (genpol's default)",
     [*MATCHED, "learner.grad_clip=per_network"], 0, "stage0"),
    ("encoder later stages (clip 0.3, grad norm 1.0, latent L2 1e-3), matched", MATCHED, 1, "later"),
]
DECODER_SETTINGS = [
    # (label, their embedding (policy.time_embedding=fpo), their decoder std)
    ("decoder, matched: their time embedding, their std + 1e-8 == 1", True, "matched"),
    ("decoder, genpol's time embedding (sin, cos of 2^k pi t)", False, "matched"),
    ("decoder, their obs std = 1 as written (divides by 1 + 1e-8)", True, "std1"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", type=Path, required=True, help="a snapshot of bennidict23/GoRL")
    parser.add_argument("--jax-python", type=Path, default=Path("/tmp/jaxvenv/bin/python"),
                        help="a Python with jax, optax and jax_dataclasses")
    parser.add_argument("--jax-init", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--jax-update", nargs=2, type=Path, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=SEED)
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
    with tempfile.TemporaryDirectory(prefix="parity_gorl_") as folder:
        init_path, in_path, out_path = Path(folder) / "init.npz", Path(folder) / "in.npz", Path(folder) / "out.npz"
        run_jax(args, "--jax-init", str(init_path), "--seed", str(args.seed))
        inputs = genpol_inputs(dict(np.load(init_path)), args.seed)
        np.savez(in_path, **inputs)
        run_jax(args, "--jax-update", str(in_path), str(out_path))
        theirs = dict(np.load(out_path))
    meta = json.loads(str(theirs["meta"]))
    sampler = {"z": difference(inputs["batch/z"], theirs["sampler/z"]),
               "log_prob": difference(inputs["batch/log_prob"], theirs["sampler/log_prob"]),
               "mean": difference(inputs["batch/mean"], theirs["sampler/mean"]),
               "scale": difference(np.exp(inputs["batch/log_std"]), theirs["sampler/std"])}
    common_fields = {"method": "gorl", "repository": "bennidict23/GoRL", "commit": commit,
                     "file": "src/flow_policy/encoder_ppo.py: EncoderState.init, sample_z, _step_minibatch, "
                             "_compute_ppo_loss; src/flow_policy/networks.py: gaussian_policy_fwd; "
                             "src/flow_policy/decoder_fm.py: DecoderFMState.init, compute_cfm_loss, train_step, "
                             "sample_action_from_z",
                     "dtype": "float64", "date": date_stamp(), "machine": machine(), "reference_stack": meta["versions"],
                     "reference_decoder_config": meta["decoder_config"], "batch": BATCH, "pairs": PAIRS,
                     "obs_dim": OBS_DIM, "act_dim": ACT_DIM}
    rows = [{**common_fields, "setting": "sampler: their sample_z vs LatentDecoderHead.sample_pre_tanh, old encoder, "
                                         "same standard normal", "differences": sampler}]
    for label, overrides, stage, their_stage in ENCODER_SETTINGS:
        ours = genpol_encoder_step(inputs, overrides, stage)
        rows.append({**common_fields, "setting": label, "part": "encoder",
                     "overrides": ["+experiment=gorl", *overrides], "genpol_stage": stage,
                     "genpol_settings": ours["settings"], "their_stage_settings": dict(zip(
                         ("clipping_epsilon", "max_grad_norm", "z_regularization"), STAGES[their_stage])),
                     "harness_patches": [],
                     "differences": compare_encoder(ours, theirs, their_stage, inputs)})
    for label, embedding, their_std in DECODER_SETTINGS:
        ours = genpol_decoder(inputs, embedding)
        rows.append({**common_fields, "setting": label, "part": "decoder",
                     "overrides": ["+experiment=gorl", *MATCHED, *([THEIR_EMBEDDING] if embedding else [])],
                     "their_decoder_obs_std": float(theirs["decoder_std"]) if their_std == "matched" else 1.0,
                     "differences": compare_decoder(ours, theirs, their_std, inputs)})
    write_results("parity_gorl.json", rows)  # a list of rows, as every bench/results/parity*.json
    print("sampler rel (z, log_prob, mean, scale): "
          + ", ".join(f"{v['rel']:.1e}" for v in sampler.values()) + "\n")
    print("| setting | log-prob rel | ratio rel | policy / value / entropy / latent-L2 / total loss rel "
          "| clipfrac (genpol / theirs) | gradients rel (encoder, value) | parameters after rel | step rel |")
    print("|---|---|---|---|---|---|---|---|")
    pair = lambda g: ", ".join(f"{v['rel']:.1e}" for v in g.values())  # noqa: E731
    losses_rel = lambda d: " / ".join(f"{d[k]['rel']:.1e}" for k in (  # noqa: E731
        "policy_loss", "v_loss", "entropy", "z_reg_loss", "total_loss"))
    for row in rows[1:]:
        d = row["differences"]
        if row["part"] != "encoder":
            continue
        print(f"| {row['setting']} | {d['log_prob']['rel']:.1e} | {d['ratio']['rel']:.1e} "
              f"| {losses_rel(d)} "
              f"| {d['clipfrac']['genpol']:.3f} / {d['clipfrac']['theirs']:.3f} | {pair(d['gradients'])} "
              f"| {pair(d['parameters_after'])} | {pair(d['step (after - before)'])} |")
    print("\n| setting | CFM per-sample rel | CFM loss rel | gradients rel | parameters after rel | step rel "
          "| decode g(s, z) rel | tanh(g) rel |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows[1:]:
        if row["part"] != "decoder":
            continue
        d = row["differences"]
        print(f"| {row['setting']} | " + " | ".join(f"{d[k]['rel']:.1e}" for k in (
            "cfm per sample", "cfm loss", "gradients", "parameters_after", "step (after - before)",
            "decode pre-tanh g(s, z)", "decode action tanh(g)")) + " |")


if __name__ == "__main__":
    main()

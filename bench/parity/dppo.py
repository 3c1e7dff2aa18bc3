"""Update-level parity of genpol's DPPO with its authors' code, on identical inputs, in float64.

The authors' repository (irom-lab/dppo) is not part of genpol: take a snapshot anywhere and point
``--ref`` at it. This script imports its ``model`` package from there: ``PPODiffusion.loss``
(``model/diffusion/diffusion_ppo.py``), ``VPGDiffusion.get_logprobs`` and ``forward`` (the sampler,
``model/diffusion/diffusion_vpg.py``), the ``DiffusionMLP`` denoiser and the ``CriticObs`` critic. Their
training loop (``agent/finetune/train_ppo_diffusion_agent.py``) needs environments and Hydra, so the few
lines of it one minibatch runs are taken here as they stand there: ``loss = pg + vf_coef * v`` (entropy and
BC terms off, vf_coef 0.5), one ``AdamW`` per network (weight decay 0, epsilon 1e-8), ``backward``, no
gradient clip (no DPPO config sets ``train.max_grad_norm``), actor step, critic step. genpol's side is
``MinibatchUpdater.eager_step`` with ``PPOClipLoss`` on a ``DiffusionHead``.

Both sides start from the same weights (their ``actor_ft``, base ``actor`` and critic copied into genpol's
``denoiser``, ``frozen_denoiser`` and value network) and see the same batch: observations, the denoising
chains their sampler drew from a perturbed old policy (ratios away from 1), the old policy's log-probs
(theirs, per element; genpol's record holds them clamped and averaged over the executed actions, as its
sampler stores them), advantages, returns and old values. Both take one Adam step at DPPO's learning rates
(actor 1e-4, critic 1e-3) and epsilon. Shapes are DPPO's Gym fine-tuning ones: K = 20 DDPM steps, K' = 10
fine-tuned, chunks of 4 actions of 3, denoiser 3 x 512, critic 3 x 256 Mish, batch 64.

Reported per row: the loss terms (policy, value, approx-KL, clipfrac), every parameter's gradient as the
optimizer sees it, every parameter after the step, genpol's own old log-probs against theirs, the
chain each sampler draws from the same seed (the same random draws, in the same order) and the log-probs
genpol's sampler records for its chain, as the largest absolute and relative difference.

What the matched rows set, on each side, and why:
* denoiser: their ``residual_style=True`` (every DPPO config) with Mish (their Robomimic configs) or ReLU
  (their Gym configs); genpol's head with its options for their network: ``policy.time_embedding=dppo``
  (``log 10000`` frequencies of the integer timestep; genpol's default: ``2^k pi`` of timestep / 1000),
  ``policy.output_activation=false`` (their ``ResidualMLP`` has no activation before its output layer) and
  ``policy.time_mlp_activation=mish`` (their time MLP is Mish whatever ``activation_type`` says; genpol's
  default follows the denoiser's activation). Each default is a departure row;
* critic: their ``CriticObs`` with ``residual_style=True`` (every DPPO config) and genpol's
  ``policy.critic_residual=true``; a matched row with both plain, a departure row with genpol's plain default;
* constant tables: the diffusion schedule is theirs computed in float64 (their ``cosine_beta_schedule``
  with ``dtype`` float64), copied into genpol's buffers, and genpol's denoising discount is evaluated in
  float64; the per-step clip is float32 on both sides (theirs ``torch.arange(K').float()``, genpol's
  ``clip_schedule``: the same numbers), so that ``1 -+ clip`` rounds alike (the clipped units' loss values
  move by ~1e-9 otherwise; they carry no gradient). Both sides build all of these in float32 (genpol its
  schedule through diffusers): the "native tables" row keeps each side's own, 3e-6 apart;
* sampling: both samplers draw x_K and then one noise tensor per step, same shapes, same order, from
  one seed; their sampler leaves the final state unclamped (``final_action_clip_value`` is unset in every
  DPPO config), and so does genpol's with ``policy.final_clamp=false`` (its default clamps it to [-1, 1], a
  departure row: the final state is also compared with theirs clamped). genpol's sampler's record (its
  last step's log-prob is of the state it stored) is compared with their log-probs of their own chains;
* genpol: ``learner.vf_coef=0.25`` (their 0.5 on ``0.5 MSE``), ``learner.adam_eps=1e-8``,
  ``learner.max_grad_norm=null``, ``policy.clip_base`` / ``learner.clip_range`` as their
  ``clip_ploss_coef_base`` / ``clip_ploss_coef``.

    python bench/parity/dppo.py --ref /path/to/dppo

Writes ``bench/results/parity_dppo.json`` (a list of rows: method, repository, commit, differences).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "bench"))  # bench/common (this script lives one folder down)

from common import date_stamp, machine, write_results  # noqa: E402
from shared import difference, reference_commit, worst  # noqa: E402

from genpol.algorithms.registry import make_critic  # noqa: E402
from genpol.heads.diffusion import DiffusionHead  # noqa: E402
from genpol.storage.rollout import Batch  # noqa: E402
from genpol.updaters.losses import PPOClipLoss  # noqa: E402
from genpol.updaters.minibatch import MinibatchUpdater  # noqa: E402

OBS_DIM, ACTION_DIM, HORIZON, K, BATCH = 11, 3, 4, 20, 64
WIDTH, CRITIC_WIDTH, TIME_DIM = 512, 256, 16
ACTOR_LR, CRITIC_LR, GAMMA_DENOISING = 1e-4, 1e-3, 0.99
OLD_POLICY_NOISE = 2e-3  # the old policy's actor_ft = the current one + this x N(0, 1) per weight


@dataclasses.dataclass(frozen=True)
class Setting:
    label: str
    ft_steps: int = 10
    act_steps: int = 4  # their reward_horizon
    clip: float = 0.01  # clip_ploss_coef (theirs), learner.clip_range (genpol)
    clip_base: float | None = 1e-3  # clip_ploss_coef_base (theirs), policy.clip_base (genpol); None: Gym's constant
    activation: str = "Mish"  # their activation_type of the denoiser (genpol's policy.activation, lower case)
    their_critic_residual: bool = True  # their CriticObs residual_style (True in every DPPO config)
    critic_residual: bool = True  # genpol's policy.critic_residual
    time_embedding: str = "dppo"  # genpol's policy.time_embedding
    output_activation: bool = False  # genpol's policy.output_activation
    time_mlp_activation: str | None = "mish"  # genpol's policy.time_mlp_activation (None: the denoiser's)
    final_clamp: bool = False  # genpol's policy.final_clamp (their final_action_clip_value is unset)
    float64_tables: bool = True  # False: each side's own (float32-built) schedule, discount and clip tables
    adam_eps: float = 1e-8  # genpol's learner.adam_eps
    max_grad_norm: float | None = None  # genpol's learner.max_grad_norm (theirs: none)


SETTINGS = [
    Setting("matched: Robomimic clip schedule 1e-3 -> 0.01"),
    Setting("matched: Gym's constant clip 0.01 (policy.clip_base=null)", clip_base=None),
    Setting("matched: act_steps 2 of horizon 4 (reward_horizon 2)", act_steps=2),
    Setting("matched: from scratch, K' = K = 20", ft_steps=K),
    Setting("matched: their Gym denoiser (ReLU; policy.time_mlp_activation=mish)", activation="ReLU"),
    Setting("matched: plain critics (their residual_style=False, policy.critic_residual=false)",
            their_critic_residual=False, critic_residual=False),
    Setting("native tables (each side's float32-built schedule, discount and clip)", float64_tables=False),
    Setting("departure: genpol's time embedding (policy.time_embedding=genpol)", time_embedding="genpol"),
    Setting("departure: genpol's activation before the denoiser output (policy.output_activation=true)",
            output_activation=True),
    Setting("departure: their Gym denoiser (ReLU), genpol's time MLP follows it (policy.time_mlp_activation=null)",
            activation="ReLU", time_mlp_activation=None),
    Setting("departure: genpol's plain critic (policy.critic_residual=false), their residual one",
            critic_residual=False),
    Setting("departure: genpol's final clamp (policy.final_clamp=true)", final_clamp=True),
    Setting("departure: genpol's default learner.adam_eps=1e-5", adam_eps=1e-5),
    # experiment=dppo_hopper sets 1.0, above this batch's gradient norms (actor 0.07, critic 0.13): 0.05 shows the clip
    Setting("departure: learner.max_grad_norm=0.05 (genpol clips each network), theirs none", max_grad_norm=0.05),
]


# --------------------------------------------------------------------------- the authors' code
def install_einops_stub() -> None:
    """Their ``model`` modules import einops at the top but use it only in the vision and UNet classes;
    where einops is not installed, a stand-in that refuses every use lets the MLP classes load."""
    if importlib.util.find_spec("einops") is not None:
        return

    def refuse(*_: Any, **__: Any) -> Any:
        raise RuntimeError("einops is not installed; this parity harness uses only DPPO's MLP classes")

    einops = types.ModuleType("einops")
    einops.rearrange = einops.repeat = einops.reduce = refuse
    layers = types.ModuleType("einops.layers")
    layers_torch = types.ModuleType("einops.layers.torch")
    layers_torch.Rearrange = layers_torch.Reduce = refuse
    einops.layers, layers.torch = layers, layers_torch
    sys.modules.update({"einops": einops, "einops.layers": layers, "einops.layers.torch": layers_torch})


def load_theirs(ref: Path) -> types.SimpleNamespace:
    """Their modules, imported as the package ``model`` from the snapshot (their absolute imports need it)."""
    install_einops_stub()
    if "model" in sys.modules and not str(getattr(sys.modules["model"], "__file__", "")).startswith(str(ref)):
        raise RuntimeError("another module named 'model' is already imported")
    sys.path.insert(0, str(ref))
    try:
        return types.SimpleNamespace(
            ppo=importlib.import_module("model.diffusion.diffusion_ppo"),
            diffusion=importlib.import_module("model.diffusion.diffusion"),
            sampling=importlib.import_module("model.diffusion.sampling"),
            mlp_diffusion=importlib.import_module("model.diffusion.mlp_diffusion"),
            modules=importlib.import_module("model.diffusion.modules"),
            critic=importlib.import_module("model.common.critic"),
        )
    finally:
        sys.path.remove(str(ref))


@contextlib.contextmanager
def float64_schedule(theirs: types.SimpleNamespace, enabled: bool) -> Iterator[None]:
    """Their ``DiffusionModel`` builds its tables from ``cosine_beta_schedule(K)`` (float32 by default)."""
    original = theirs.diffusion.cosine_beta_schedule
    if enabled:
        theirs.diffusion.cosine_beta_schedule = lambda steps: original(steps, dtype=torch.float64)
    try:
        yield
    finally:
        theirs.diffusion.cosine_beta_schedule = original


def their_model(theirs: types.SimpleNamespace, s: Setting, width: int = WIDTH, critic_width: int = CRITIC_WIDTH
                ) -> nn.Module:
    """Their ``PPODiffusion`` at setting ``s``; ``width`` / ``critic_width``: of the 3 hidden layers of the
    denoiser and the critic (``bench/authors_cost.py`` builds it at genpol's +experiment=dppo_hopper widths)."""
    actor = theirs.mlp_diffusion.DiffusionMLP(action_dim=ACTION_DIM, horizon_steps=HORIZON, cond_dim=OBS_DIM,
                                              time_dim=TIME_DIM, mlp_dims=[width] * 3, activation_type=s.activation,
                                              residual_style=True)
    critic = theirs.critic.CriticObs(cond_dim=OBS_DIM, mlp_dims=[critic_width] * 3, activation_type="Mish",
                                     residual_style=s.their_critic_residual)
    with float64_schedule(theirs, s.float64_tables):
        return theirs.ppo.PPODiffusion(
            actor=actor, critic=critic, ft_denoising_steps=s.ft_steps, gamma_denoising=GAMMA_DENOISING,
            clip_ploss_coef=s.clip, clip_ploss_coef_base=s.clip if s.clip_base is None else s.clip_base,
            clip_ploss_coef_rate=3, randn_clip_value=3, min_sampling_denoising_std=0.1,
            min_logprob_denoising_std=0.1, denoised_clip_value=1.0, horizon_steps=HORIZON, obs_dim=OBS_DIM,
            action_dim=ACTION_DIM, denoising_steps=K, device="cpu")


# --------------------------------------------------------------------------- genpol's side
def linears(module: nn.Module) -> list[nn.Linear]:
    return [layer for layer in module.modules() if isinstance(layer, nn.Linear)]


def linear_params(module: nn.Module) -> list[nn.Parameter]:
    return [p for layer in linears(module) for p in (layer.weight, layer.bias)]


def copy_linears(source: nn.Module, target: nn.Module) -> None:
    """Layer by layer in module order: their time MLP then body (input, residual l1 / l2, output) into
    genpol's time_mlp then body (input, blocks, output); their critic's layers (input, l1, l2, output, or
    the plain MLP's four) into genpol's, residual or plain: the same four shapes either way."""
    pairs = list(zip(linears(source), linears(target), strict=True))
    with torch.no_grad():
        for a, b in pairs:
            b.weight.copy_(a.weight)
            b.bias.copy_(a.bias)


def genpol_head(model: nn.Module, s: Setting) -> DiffusionHead:
    head = DiffusionHead(OBS_DIM, s.act_steps * ACTION_DIM, act_steps=s.act_steps, horizon_steps=HORIZON,
                         denoising_steps=K, ft_denoising_steps=s.ft_steps, hidden_sizes=[WIDTH] * 3,
                         activation=s.activation.lower(), time_dim=TIME_DIM, min_sampling_std=0.1,
                         min_logprob_std=0.1, randn_clip=3.0, denoised_clip=1.0, logprob_clamp=[-5.0, 2.0],
                         gamma_denoising=GAMMA_DENOISING, clip_base=s.clip_base,
                         # as genpol's config: without clip_base no per-step clip, the updater's clip_range
                         clip_final=None if s.clip_base is None else s.clip,
                         time_embedding=s.time_embedding, output_activation=s.output_activation,
                         time_mlp_activation=s.time_mlp_activation, final_clamp=s.final_clamp,
                         critic_hidden_sizes=[CRITIC_WIDTH] * 3, critic_activation="mish",
                         critic_residual=s.critic_residual).double()
    copy_linears(model.actor_ft, head.denoiser)
    if head.frozen_denoiser is not None:
        copy_linears(model.actor, head.frozen_denoiser)
    if s.float64_tables:
        with torch.no_grad():
            t = K - 1 - torch.arange(K)  # the diffusion timestep of sampling step i (DDPM)
            head.alpha_bar.copy_(model.alphas_cumprod[t])
            head.alpha_bar_prev.copy_(model.alphas_cumprod_prev[t])
            head.coef_x0.copy_(model.ddpm_mu_coef1[t])
            head.coef_xt.copy_(model.ddpm_mu_coef2[t])
            head.variance.copy_(model.ddpm_var[t].clamp(min=1e-20))
            j = torch.arange(s.ft_steps, dtype=torch.float64)
            head.unit_weights.copy_(GAMMA_DENOISING ** (s.ft_steps - 1 - j))
        if head.unit_clip is not None:  # the same float32 values; 1 -+ clip then rounds in float32, as theirs
            head.unit_clip = head.unit_clip.float()
    return head


# --------------------------------------------------------------------------- comparing
class GradientRecorder:
    """Keeps each parameter's gradient as the optimizer's step sees it (after any clip)."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.gradients: dict[int, torch.Tensor] = {}
        optimizer.register_step_pre_hook(self.record)

    def record(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        self.gradients.update({id(p): p.grad.detach().clone() for group in optimizer.param_groups
                               for p in group["params"]})


def one_step(theirs: types.SimpleNamespace, s: Setting, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = their_model(theirs, s)
    old = copy.deepcopy(model)  # the policy that drew the batch: actor_ft perturbed, base actor and critic shared
    with torch.no_grad():
        for parameter in old.actor_ft.parameters():
            parameter.add_(OLD_POLICY_NOISE * torch.randn_like(parameter))
    obs = torch.randn(BATCH, OBS_DIM)
    cond = {"state": obs.unsqueeze(1)}  # cond_steps 1
    advantages = 2 * torch.randn(BATCH) + 0.3
    returns, old_values = torch.randn(BATCH), torch.randn(BATCH)

    head, old_head = genpol_head(model, s), genpol_head(old, s)
    critic = make_critic(head.config, OBS_DIM).double()  # the policy group's value network
    copy_linears(model.critic, critic.net)

    # the batch: their sampler on the old policy; both samplers from one seed, for the sampling comparison
    torch.manual_seed(seed + 1)
    chains = old(cond=cond, deterministic=False, return_chain=True).chains  # [B, K' + 1, Ta, Da]
    torch.manual_seed(seed + 1)
    _, genpol_record = old_head.sample(obs)
    with torch.no_grad():
        old_log_probs = old.get_logprobs(cond, chains).view(BATCH, s.ft_steps, HORIZON, ACTION_DIM)
        # what genpol's sampler records: clamped, averaged over the executed actions (their loss does this)
        reduced_old = old_log_probs.clamp(-5, 2)[:, :, :s.act_steps].mean(dim=(-1, -2))
        genpol_old = old_head.chain_log_probs(obs, chains.flatten(2))[0]
    flat_genpol_chain = genpol_record["chain"].view_as(chains)
    final = chains[:, -1]
    sampling = {"chain_before_final_state": difference(flat_genpol_chain[:, :-1], chains[:, :-1]),
                "final_state": difference(flat_genpol_chain[:, -1], final),
                "final_state_vs_theirs_clamped_to_box": difference(flat_genpol_chain[:, -1], final.clamp(-1, 1)),
                "their_final_elements_outside_box": (final.abs() > 1).double().mean().item(),
                # genpol's sampler's record (log-probs of the chain it stored) against theirs of their chain
                "record_log_probs": difference(genpol_record["log_prob"], reduced_old),
                "record_last_step_log_prob": difference(genpol_record["log_prob"][:, -1], reduced_old[:, -1])}

    # the authors' update: their loss, then their training loop's lines for one minibatch
    actor_optimizer = torch.optim.AdamW(model.actor_ft.parameters(), lr=ACTOR_LR, weight_decay=0)
    critic_optimizer = torch.optim.AdamW(model.critic.parameters(), lr=CRITIC_LR, weight_decay=0)
    their_recorders = [GradientRecorder(actor_optimizer), GradientRecorder(critic_optimizer)]
    pg_loss, entropy_loss, v_loss, clipfrac, approx_kl, _, bc_loss, _ = model.loss(
        cond, chains.clone(), returns.clone(), old_values.clone(), advantages.clone(), old_log_probs.clone(),
        use_bc_loss=False, reward_horizon=s.act_steps)
    loss = pg_loss + entropy_loss * 0.0 + v_loss * 0.5 + bc_loss * 0.0  # ent_coef 0, vf_coef 0.5, no BC
    actor_optimizer.zero_grad()
    critic_optimizer.zero_grad()
    loss.backward()
    actor_optimizer.step()  # train.max_grad_norm is unset in every DPPO config: no clip
    critic_optimizer.step()

    # genpol's update: one eager minibatch step of PPOClipLoss on the diffusion head
    # their clip is a float32 tensor (``torch.arange(K').float()``), so their 1 -+ clip round in float32:
    # with float64_tables genpol's clip is that float32 number too (a python float otherwise)
    clip_range = torch.tensor(s.clip, dtype=torch.float32) if s.float64_tables else s.clip
    updater = MinibatchUpdater(head, critic, PPOClipLoss(clip_range=clip_range, ent_coef=0.0, vf_coef=0.25,
                                                         clip_range_vf=None, normalize_advantage=True),
                               lr=ACTOR_LR, critic_lr=CRITIC_LR, epochs=1, minibatch_size=BATCH,
                               max_grad_norm=s.max_grad_norm, target_kl=None, adam_eps=s.adam_eps)
    our_recorder = GradientRecorder(updater.optimizer)
    named = updater.eager_step(Batch(obs=obs, record={"chain": chains.flatten(2), "log_prob": reduced_old},
                                     advantages=advantages, returns=returns, values=old_values))

    their_grads = {**their_recorders[0].gradients, **their_recorders[1].gradients}
    theirs_params = [*linear_params(model.actor_ft), *linear_params(model.critic)]
    ours_params = [*linear_params(head.denoiser), *linear_params(critic.net)]
    gradients = [difference(our_recorder.gradients[id(o)], their_grads[id(t)])
                 for o, t in zip(ours_params, theirs_params)]
    parameters = [difference(o.detach(), t.detach()) for o, t in zip(ours_params, theirs_params)]
    n_actor = len(linear_params(model.actor_ft))
    norms = {name: torch.cat([their_grads[id(p)].view(-1) for p in params]).norm().item()
             for name, params in (("actor", theirs_params[:n_actor]), ("critic", theirs_params[n_actor:]))}
    result = {
        "loss_terms": {"policy": difference(named["policy"], pg_loss.detach()),
                       # genpol reports its value term before vf_coef: 2 x theirs (their 0.5 inside)
                       "value": difference(named["value"] / 2, v_loss.detach()),
                       "approx_kl": difference(named["approx_kl"], approx_kl),
                       "clipfrac": difference(named["clipfrac"], clipfrac)},
        "clipfrac": {"genpol": named["clipfrac"].item(), "theirs": clipfrac},
        "gradients": worst(gradients), "parameters_after_step": worst(parameters),
        "actor_gradients": worst(gradients[:n_actor]), "critic_gradients": worst(gradients[n_actor:]),
        "their_gradient_norms": norms,
        "old_log_probs": difference(genpol_old, reduced_old), "sampling": sampling,
        "per_parameter_gradient_rel": [g["rel"] for g in gradients],
    }
    if not s.float64_tables:  # each side's own tables: how far apart they are
        t = K - 1 - torch.arange(K)
        result["schedule_tables"] = worst([
            difference(head.alpha_bar, model.alphas_cumprod[t]), difference(head.coef_x0, model.ddpm_mu_coef1[t]),
            difference(head.coef_xt, model.ddpm_mu_coef2[t]), difference(head.variance, model.ddpm_var[t])])
        j = torch.arange(s.ft_steps)
        result["discount_table"] = difference(head.unit_weights, GAMMA_DENOISING ** (s.ft_steps - 1 - j).double())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", type=Path, required=True, help="a snapshot of the authors' repository")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)  # their sampler and time embedding draw and build in the default dtype
    ref = args.ref.resolve()
    commit = reference_commit(ref)
    theirs = load_theirs(ref)
    rows = []
    for setting in SETTINGS:
        result = one_step(theirs, setting, args.seed)
        rows.append({"method": "dppo", "repository": "irom-lab/dppo", "commit": commit,
                     "file": "model/diffusion/diffusion_ppo.py: PPODiffusion.loss; model/diffusion/diffusion_vpg.py: "
                             "VPGDiffusion.get_logprobs, forward",
                     "setting": setting.label, "options": dataclasses.asdict(setting), "dtype": "float64",
                     "date": date_stamp(), "machine": machine(), **result})
        print(f"done: {setting.label}", file=sys.stderr, flush=True)
    write_results("parity_dppo.json", rows)  # a list of rows, as every bench/results/parity*.json
    print("| setting | policy loss rel | value loss rel | approx KL rel | clipfrac (genpol / theirs) "
          "| gradients rel (actor / critic) | parameters after step rel | sampled chain rel (before final / final) "
          "| sampler's record log-probs rel |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        terms, sampling = row["loss_terms"], row["sampling"]
        print(f"| {row['setting']} | {terms['policy']['rel']:.1e} | {terms['value']['rel']:.1e} "
              f"| {terms['approx_kl']['rel']:.1e} | {row['clipfrac']['genpol']:.3f} / {row['clipfrac']['theirs']:.3f} "
              f"| {row['actor_gradients']['rel']:.1e} / {row['critic_gradients']['rel']:.1e} "
              f"| {row['parameters_after_step']['rel']:.1e} "
              f"| {sampling['chain_before_final_state']['rel']:.1e} / {sampling['final_state']['rel']:.1e} "
              f"| {sampling['record_log_probs']['rel']:.1e} |")


if __name__ == "__main__":
    main()

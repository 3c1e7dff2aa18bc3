"""DPPO's diffusion head against hand computations, diffusers, and its fine-tuning contract."""

import math

import numpy as np
import pytest
import torch

from genpol.heads import DiffusionHead
from genpol.policy import TrainedPolicy


def constant_denoiser(head: DiffusionHead, value: float) -> None:
    """Make the trainable denoiser predict eps = ``value`` everywhere."""
    with torch.no_grad():
        for parameter in head.denoiser.parameters():
            parameter.zero_()
        head.denoiser.body.output[-1].bias.fill_(value)


def cosine_alpha_bar(k: int, steps: int) -> float:
    """The squaredcos_cap_v2 schedule written out (Nichol & Dhariwal 2021, s = 0.008)."""
    def f(t):
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
    alpha_bar = 1.0
    for i in range(k + 1):
        alpha_bar *= 1 - min(1 - f((i + 1) / steps) / f(i / steps), 0.999)
    return alpha_bar


def test_two_step_chain_log_probs_by_hand():
    from diffusers import DDPMScheduler  # here: diffusers takes ~2.5 s to import at collection
    head = DiffusionHead(obs_dim=2, act_dim=1, denoising_steps=2, ft_denoising_steps=2, hidden_sizes=(8, 8, 8),
                         min_logprob_std=0.1)
    constant_denoiser(head, 0.3)
    a0, a1 = cosine_alpha_bar(0, 2), cosine_alpha_bar(1, 2)
    assert head.train_alphas_cumprod.tolist() == pytest.approx([a0, a1], rel=1e-5, abs=1e-7)
    obs = torch.zeros(1, 2)
    x2, x1, x0 = 0.7, -0.2, 0.4  # a chain: noise, after step t=1, after step t=0
    chain = torch.tensor([[[x2], [x1], [x0]]])
    log_probs, means = head.chain_log_probs(obs, chain)

    def log_normal(x, mean, std):
        return max(min(-0.5 * ((x - mean) / std) ** 2 - math.log(std) - 0.5 * math.log(2 * math.pi), 2.0), -5.0)

    # step t = 1: x0_hat from eps = 0.3, posterior mean and std (clipped below at 0.1)
    beta1 = 1 - a1 / a0
    x0_hat = max(min((x2 - math.sqrt(1 - a1) * 0.3) / math.sqrt(a1), 1.0), -1.0)
    mean1 = math.sqrt(a0) * beta1 / (1 - a1) * x0_hat + math.sqrt(1 - beta1) * (1 - a0) / (1 - a1) * x2
    std1 = max(math.sqrt(beta1 * (1 - a0) / (1 - a1)), 0.1)
    # step t = 0: alpha_bar_prev = 1, so the mean is x0_hat and the variance 0 -> std 0.1
    mean0 = max(min((x1 - math.sqrt(1 - a0) * 0.3) / math.sqrt(a0), 1.0), -1.0)
    assert means[0, :, 0].tolist() == pytest.approx([mean1, mean0], rel=1e-5, abs=1e-6)
    assert log_probs[0].tolist() == pytest.approx([log_normal(x1, mean1, std1), log_normal(x0, mean0, 0.1)],
                                                  rel=1e-5)
    # diffusers' own DDPM step agrees on the last step's mean (it adds no noise at t = 0)
    scheduler = DDPMScheduler(num_train_timesteps=2, beta_schedule="squaredcos_cap_v2", clip_sample=True)
    reference = scheduler.step(torch.tensor([[0.3]]), 0, torch.tensor([[x1]])).prev_sample
    assert reference.item() == pytest.approx(mean0, rel=1e-5)


def test_only_the_fine_tuned_steps_train():
    torch.manual_seed(0)
    head = DiffusionHead(obs_dim=3, act_dim=2, denoising_steps=6, ft_denoising_steps=2, hidden_sizes=(16, 16, 16))
    head.start_finetuning()
    obs = torch.randn(8, 3)
    torch.manual_seed(1)
    with torch.no_grad():
        _, record = head.sample(obs)
        for parameter in head.denoiser.parameters():  # small: large changes saturate the log-prob clamp
            parameter.add_(0.01 * torch.randn_like(parameter))
    head.log_ratio(obs, record).log_ratio.sum().backward()
    assert all(p.grad is None for p in head.frozen_denoiser.parameters())
    assert not any(p.requires_grad for p in head.frozen_denoiser.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in head.denoiser.parameters())
    # the early (frozen) steps did not change: the first stored state is the same sample as before
    torch.manual_seed(1)
    with torch.no_grad():
        _, again = head.sample(obs)
    assert torch.equal(again["chain"][:, 0], record["chain"][:, 0])
    assert not torch.equal(again["chain"][:, -1], record["chain"][:, -1])


def test_denoising_discount_and_interpolated_clip():
    head = DiffusionHead(obs_dim=2, act_dim=1, denoising_steps=5, ft_denoising_steps=3, gamma_denoising=0.9,
                         clip_base=0.001, clip_final=0.01, hidden_sizes=(8, 8, 8))
    terms = head.log_ratio(torch.zeros(1, 2), head.sample(torch.zeros(1, 2))[1])
    assert terms.log_ratio.shape == (1, 3)
    assert terms.unit_weights.tolist() == pytest.approx([0.81, 0.9, 1.0])  # the final step weighs 1
    middle = 0.001 + 0.009 * (math.exp(1.5) - 1) / (math.exp(3) - 1)
    assert terms.unit_clip.tolist() == pytest.approx([0.001, middle, 0.01])


def test_a_single_fine_tuned_step_gets_the_final_clip():
    """K' = 1: the one fine-tuned step is the last denoising step (x^1 -> x^0), so it gets clip_final, as in
    DPPO's code (``clip_ploss_coef`` when ft_denoising_steps == 1) - not clip_base, the noisiest step's."""
    head = DiffusionHead(obs_dim=2, act_dim=1, denoising_steps=5, ft_denoising_steps=1, clip_base=0.001,
                         clip_final=0.01, hidden_sizes=(8, 8, 8))
    head.start_finetuning()
    terms = head.log_ratio(torch.zeros(1, 2), head.sample(torch.zeros(1, 2))[1])
    assert terms.log_ratio.shape == (1, 1)
    assert terms.unit_clip.tolist() == pytest.approx([0.01])
    assert terms.unit_weights.tolist() == [1.0]  # the last step is undiscounted too


def test_without_clip_final_the_updater_clip_applies_to_every_step():
    """The head hands out no per-step clip unless given one, so it cannot silently replace the updater's
    clip_range; a schedule start (clip_base) without its end (clip_final) is refused."""
    head = DiffusionHead(obs_dim=2, act_dim=1, denoising_steps=5, ft_denoising_steps=5, hidden_sizes=(8, 8, 8))
    assert head.log_ratio(torch.zeros(1, 2), head.sample(torch.zeros(1, 2))[1]).unit_clip is None
    constant = DiffusionHead(obs_dim=2, act_dim=1, denoising_steps=5, ft_denoising_steps=3, clip_final=0.05,
                             hidden_sizes=(8, 8, 8))
    assert constant.unit_clip.tolist() == pytest.approx([0.05] * 3)
    with pytest.raises(ValueError, match="clip_base needs clip_final"):
        DiffusionHead(obs_dim=2, act_dim=1, denoising_steps=5, ft_denoising_steps=5, clip_base=0.001,
                      hidden_sizes=(8, 8, 8))


def test_exact_kl_matches_torch_distributions():
    torch.manual_seed(0)
    head = DiffusionHead(obs_dim=3, act_dim=2, denoising_steps=4, ft_denoising_steps=4, hidden_sizes=(16, 16, 16))
    obs = torch.randn(5, 3)
    with torch.no_grad():
        _, record = head.sample(obs)
        for parameter in head.denoiser.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
        _, new_means = head.chain_log_probs(obs, record["chain"])
    std = head.variance.sqrt().clamp(min=0.1)  # the log-prob std of each step
    old = torch.distributions.Normal(record["mean"], std.view(1, -1, 1))
    new = torch.distributions.Normal(new_means, std.view(1, -1, 1))
    expected = torch.distributions.kl_divergence(old, new).mean(dim=(1, 2))
    assert torch.allclose(head.kl(obs, record), expected, atol=1e-6)


def test_sampling_respects_the_std_floor_and_the_clips():
    torch.manual_seed(0)
    head = DiffusionHead(obs_dim=2, act_dim=2, denoising_steps=10, ft_denoising_steps=10, hidden_sizes=(8, 8, 8),
                         min_sampling_std=0.3)
    constant_denoiser(head, 0.0)
    with torch.no_grad():
        actions, record = head.sample(torch.zeros(4000, 2))
    assert actions.abs().max() <= 1.0  # the final sample is clipped to the action box
    # with eps = 0 every step pulls towards x0_hat = x / sqrt(alpha_bar) clipped; the last step's spread
    # near the end comes from the std floor of 0.3 (raw DDPM stds there are < 0.1)
    last_noise = record["chain"][:, -2] - record["mean"][:, -2]  # before the final clip to [-1, 1]
    assert last_noise.std().item() == pytest.approx(0.3, rel=0.1)
    assert (last_noise.abs() <= 3 * 0.3 + 1e-6).all()  # noise clipped at 3 sigma


def test_deterministic_ddim_uses_eta_zero():
    torch.manual_seed(0)
    head = DiffusionHead(obs_dim=2, act_dim=2, denoising_steps=20, use_ddim=True, ddim_steps=5, ft_denoising_steps=5,
                         hidden_sizes=(8, 8, 8))
    obs = torch.randn(3, 2)
    assert torch.equal(head.act(obs), head.act(obs))
    assert head.timesteps.tolist() == [16.0, 12.0, 8.0, 4.0, 0.0]


def loop_chain_log_probs(head: DiffusionHead, obs: torch.Tensor, chain: torch.Tensor) -> torch.Tensor:
    """The per-step reference: one network call per fine-tuned step, log-density by torch.distributions,
    clamped per element and averaged over the executed dims -> ``[B, K']``."""
    first = head.num_steps - head.ft_steps
    columns = []
    for j in range(head.ft_steps):
        step = torch.full((obs.shape[0],), first + j, dtype=torch.long)
        mean, variance = head.step_mean(chain[:, j], step, obs, head.denoiser, head.ddim_eta)
        normal = torch.distributions.Normal(mean, variance.sqrt().clamp(min=head.min_logprob_std).expand_as(mean))
        element = normal.log_prob(chain[:, j + 1])[:, : head.executed_dim].clamp(*head.logprob_clamp)
        columns.append(element.mean(dim=-1))
    return torch.stack(columns, dim=1)


@pytest.mark.parametrize("ddim", [False, True], ids=["ddpm-frozen-steps", "ddim"])
def test_batched_chain_log_probs_match_a_loop_over_steps(ddim):
    """``chain_log_probs`` evaluates all K' steps in one network call over [B * K'] stacked (x_k, k, s)
    rows; a Python loop over the steps with torch.distributions gives the same numbers, gradients included."""
    torch.manual_seed(0)
    kwargs = dict(use_ddim=True, ddim_steps=5, ft_denoising_steps=5, ddim_eta=0.8) if ddim else \
        dict(ft_denoising_steps=4)
    head = DiffusionHead(obs_dim=3, act_dim=6, act_steps=2, horizon_steps=3, denoising_steps=20,
                         hidden_sizes=(16, 16, 16), **kwargs)
    head.start_finetuning()
    obs = torch.randn(7, 3)
    with torch.no_grad():
        _, record = head.sample(obs)
        for parameter in head.denoiser.parameters():  # away from the sampling weights: ratios != 1
            parameter.add_(0.02 * torch.randn_like(parameter))
    batched, _ = head.chain_log_probs(obs, record["chain"])
    looped = loop_chain_log_probs(head, obs, record["chain"])
    assert batched.shape == (7, head.ft_steps)
    assert torch.allclose(batched, looped, atol=1e-5)
    assert not torch.allclose(batched, record["log_prob"], atol=1e-4)  # the perturbation is seen
    weights = torch.randn(7, head.ft_steps)
    batched_grad = torch.autograd.grad((batched * weights).sum(), list(head.denoiser.parameters()))
    looped_grad = torch.autograd.grad((looped * weights).sum(), list(head.denoiser.parameters()))
    for a, b in zip(batched_grad, looped_grad):
        assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("eta", [1.0, 0.5, 0.0])
def test_ddim_step_matches_diffusers_ddim_scheduler(eta):
    """Each DDIM step (mean and std at ``eta``) is diffusers' ``DDIMScheduler.step`` on the same
    cosine tables, x0 clipped to [-1, 1] and the noise prediction recomputed from the clipped x0
    (``clip_sample``, ``use_clipped_model_output``), with the same unit noise."""
    from diffusers import DDIMScheduler  # here: diffusers takes ~2.5 s to import at collection
    torch.manual_seed(0)
    head = DiffusionHead(obs_dim=3, act_dim=4, denoising_steps=20, use_ddim=True, ddim_steps=5,
                         ft_denoising_steps=5, hidden_sizes=(16, 16, 16))
    scheduler = DDIMScheduler(num_train_timesteps=20, beta_schedule="squaredcos_cap_v2", prediction_type="epsilon",
                              clip_sample=True, clip_sample_range=1.0, set_alpha_to_one=True)
    scheduler.set_timesteps(5)
    assert head.timesteps.long().tolist() == scheduler.timesteps.tolist()
    obs, x = torch.randn(6, 3), 1.5 * torch.randn(6, 4)  # wide enough that some x0 predictions get clipped
    with torch.no_grad():
        for i, timestep in enumerate(scheduler.timesteps):
            noise = torch.randn(6, 4)
            eps = head.denoiser(x, head.timesteps[i].expand(6), obs)
            expected = scheduler.step(eps, int(timestep), x, eta=eta, use_clipped_model_output=True,
                                      variance_noise=noise).prev_sample
            mean, variance = head.step_mean(x, torch.full((6,), i), obs, head.denoiser, eta)
            assert torch.allclose(mean + variance.sqrt() * noise, expected, atol=1e-5), f"step {i}"
            x = expected


@pytest.mark.parametrize("eval_eta", [0.0, 1.0])
def test_deterministic_ddim_follows_the_noise_free_chain_at_the_evaluation_eta(eval_eta):
    """``act(deterministic=True)`` with DDIM is x_K from the fixed-seed generator (one draw, shared by
    every state of the batch) pushed through the step means at ``ddim_eval_eta`` with no noise, written
    here as diffusers' ``DDIMScheduler.step`` with ``eta = ddim_eval_eta`` and zero ``variance_noise``;
    the sampling eta (1) is not used."""
    from diffusers import DDIMScheduler  # here: diffusers takes ~2.5 s to import at collection
    torch.manual_seed(0)
    head = DiffusionHead(obs_dim=3, act_dim=4, denoising_steps=20, use_ddim=True, ddim_steps=5,
                         ft_denoising_steps=5, hidden_sizes=(16, 16, 16), ddim_eval_eta=eval_eta)
    scheduler = DDIMScheduler(num_train_timesteps=20, beta_schedule="squaredcos_cap_v2", prediction_type="epsilon",
                              clip_sample=True, clip_sample_range=1.0, set_alpha_to_one=True)
    scheduler.set_timesteps(5)
    obs = torch.randn(6, 3)
    with torch.no_grad():
        x = torch.randn(1, 4, generator=torch.Generator().manual_seed(0)).expand(6, 4)
        for i, timestep in enumerate(scheduler.timesteps):
            eps = head.denoiser(x, head.timesteps[i].expand(6), obs)
            x = scheduler.step(eps, int(timestep), x, eta=eval_eta, use_clipped_model_output=True,
                               variance_noise=torch.zeros(6, 4)).prev_sample
        action = head.act(obs, deterministic=True)
    assert torch.allclose(action, x.clamp(-1, 1), atol=1e-5)
    other = DiffusionHead(obs_dim=3, act_dim=4, denoising_steps=20, use_ddim=True, ddim_steps=5, ft_denoising_steps=5,
                          hidden_sizes=(16, 16, 16), ddim_eval_eta=1.0 - eval_eta)
    other.load_state_dict(head.state_dict())
    assert not torch.allclose(other.act(obs, deterministic=True), action, atol=1e-3)  # the eta matters


def test_memory_per_stored_chain():
    """The record holds K' + 1 chain states, K' means and K' log-probs per sample."""
    head = DiffusionHead(obs_dim=11, act_dim=12, act_steps=4, horizon_steps=4, denoising_steps=20,
                         ft_denoising_steps=10, hidden_sizes=(32, 32, 32))
    with torch.no_grad():
        _, record = head.sample(torch.zeros(2, 11))
    floats = sum(value[0].numel() for value in record.values())
    assert floats == 11 * 12 + 10 * 12 + 10  # 262 floats = 1048 bytes per sample
    assert np.prod(record["chain"].shape[1:]) == 11 * 12


def test_the_pretrained_policy_is_evaluated_with_every_step_pretrained(tmp_path, hopper_dataset, monkeypatch):
    """With K' < K the early steps run ``frozen_denoiser``, which holds the random initialization until
    ``start_finetuning`` copies the pretrained weights into it. The pretrained policy's evaluation must
    come after that copy: before it, the first K - K' steps denoised with random weights (measured on
    Hopper: a pretrained return of 240 with K' = 5 against 724 with every step pretrained). The same
    holds for the policy a pretraining checkpoint stores (``genpol.evaluate checkpoint=.../pretrain/...``)."""
    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.train import run_training

    frozen_matches_trained = []
    original_act = DiffusionHead.act

    def recording_act(self, obs, deterministic=True):
        pairs = zip(self.denoiser.state_dict().values(), self.frozen_denoiser.state_dict().values())
        frozen_matches_trained.append(all(torch.equal(a, b) for a, b in pairs))
        return original_act(self, obs, deterministic)

    monkeypatch.setattr(DiffusionHead, "act", recording_act)
    cfg = validate(compose_config([
        "+experiment=dppo_hopper", f"dataset.path={hopper_dataset}", "policy.denoising_steps=4",
        "policy.ft_denoising_steps=2", "policy.hidden_sizes=[16,16,16]", "policy.critic_hidden_sizes=[16]",
        "pipeline.pretrain_steps=20", "pipeline.pretrain_log_every=10", "pipeline.pretrain_checkpoint_every=1",
        "pipeline.compile_sampling=false",
        "pipeline.eval_episodes=1", "pipeline.video=false", "env.num_envs=2", "env.max_episode_steps=20",
        "learner.rollout_steps=8", "learner.minibatch_size=16", "learner.epochs=1", "total_steps=64",
        "logger.progress_bar=false", "logger.tensorboard=false", f"run_dir={tmp_path / 'run'}"]))
    run_training(cfg, tmp_path / "run")
    assert frozen_matches_trained[0], "the pretrained evaluation ran the early steps on random weights"
    assert not frozen_matches_trained[-1]  # the final evaluation: the fine-tuned steps have moved
    for step in (10, 20):  # mid-pretraining and final pretraining checkpoints
        policy = TrainedPolicy.load(tmp_path / "run" / "pretrain" / "checkpoints" / f"step_{step:012d}")
        pairs = zip(policy.head.denoiser.state_dict().values(), policy.head.frozen_denoiser.state_dict().values())
        assert all(torch.equal(a, b) for a, b in pairs), f"pretraining checkpoint {step}: random frozen steps"


@pytest.mark.parametrize("mode", ["inward", "zero"])
def test_the_diffusion_chain_passes_the_q_gradient_of_a_saturated_action_back_in(mode):
    """Diffusion-QL (the diffusion head's ``rsample``): the last step's clamp follows ``clamp_gradient``.
    One DDPM step (K = 1: alpha_bar_prev = 1, so the action is the clamp of x0_hat = (x - sqrt(1 - abar) eps) /
    sqrt(abar), no noise), eps_theta's last layer W = 0 and bias b = -20, every x0_hat far above 1 and
    unclipped (denoised_clip 1e6): da/db = -coef_x0 sqrt(1 - abar) / sqrt(abar) per element before the clamp.
    A loss sum(a) (a critic preferring smaller actions) gets 4x that under ``inward``, 0 under torch's clamp;
    the outward loss -sum(a) gets 0 in both."""
    torch.manual_seed(0)
    head = DiffusionHead(3, 2, denoising_steps=1, ft_denoising_steps=1, hidden_sizes=(8,), min_sampling_std=0.0,
                         denoised_clip=1e6, clamp_gradient=mode)
    last_layer = head.denoiser.body.output[-1]
    with torch.no_grad():
        last_layer.weight.zero_()
        last_layer.bias.fill_(-20.0)
    obs = torch.randn(4, 3)
    actions = head.rsample(obs)
    assert torch.equal(actions, torch.ones(4, 2))
    assert torch.equal(head.act(obs), actions)  # the same values outside rsample
    actions.sum().backward()
    alpha_bar = head.alpha_bar[0].item()
    per_element = -head.coef_x0[0].item() * (1 - alpha_bar) ** 0.5 / alpha_bar**0.5
    expected = 4 * per_element if mode == "inward" else 0.0
    assert per_element != 0.0
    assert last_layer.bias.grad.tolist() == pytest.approx([expected, expected], rel=1e-5, abs=0)
    head.zero_grad()
    (-head.rsample(obs).sum()).backward()
    assert torch.equal(last_layer.bias.grad, torch.zeros(2))

"""GoRL's DDIM decoder (``policy.decoder=ddim``): its sampler against diffusers' ``DDIMScheduler.step``
and a hand-computed step, its epsilon loss against ``DDPMScheduler.add_noise``, stage 0's bypass (the
decoder output is z exactly), learning a bimodal target from N(0, I), and the pipeline through a
stage transition on the real MultiGoal env."""

import math

import pytest
import torch

from genpol.checkpoint import list_checkpoints, load_policy_files, load_training_state
from genpol.config import ConfigError
from genpol.heads import head_from_spec
from genpol.heads.latent import LatentDecoderHead
from genpol.heads.latent_ddim import DDIMSchedule
from genpol.pipelines.gorl.distill import DecoderTraining

from conftest import assert_trees_equal
from test_gorl import ARGS, kill_mid_stage_1_and_resume

OBS_DIM, ACT_DIM = 5, 3


def toy_epsilon(x, t):
    """A fixed, non-trivial noise prediction (x [B, A], t [B]) -> [B, A], the same for both samplers."""
    return 0.7 * x + torch.sin(3 * x) * (1 + t).unsqueeze(-1) - 0.2


def cosine_alpha_bar(u):
    """The cosine schedule's abar at u in [0, 1] (Nichol & Dhariwal 2021, offset 0.008)."""
    f = lambda v: math.cos((v + 0.008) / 1.008 * math.pi / 2) ** 2  # noqa: E731
    return f(u) / f(0)


@pytest.mark.parametrize("train_timesteps, steps", [(10, 10), (20, 4), (6, 3), (5, 1)])
def test_sampler_matches_diffusers_ddim_scheduler_step(train_timesteps, steps):
    """Our tables are diffusers' for T + 1 timesteps without the last (zero-SNR) one; each of our steps
    is ``DDIMScheduler.step`` at eta = 0 on those tables."""
    from diffusers import DDIMScheduler  # here: diffusers takes ~2.5 s to import at collection
    schedule = DDIMSchedule(train_timesteps, steps)
    scheduler = DDIMScheduler(num_train_timesteps=train_timesteps + 1, beta_schedule="squaredcos_cap_v2",
                              prediction_type="epsilon", clip_sample=False, set_alpha_to_one=True)
    scheduler.set_timesteps(steps)  # step() takes its stride from num_inference_steps
    assert scheduler.alphas_cumprod[-1] < 1e-4  # the dropped, zero-SNR timestep
    stride = train_timesteps // steps
    assert schedule.timesteps.tolist() == list(range(train_timesteps - 1, -1, -stride))
    assert torch.equal(schedule.alphas_cumprod, scheduler.alphas_cumprod[:train_timesteps])
    assert schedule.alphas_cumprod.tolist() == pytest.approx(
        [cosine_alpha_bar((k + 1) / (train_timesteps + 1)) for k in range(train_timesteps)], rel=1e-4)
    z = torch.randn(16, ACT_DIM)
    x = z
    for timestep in schedule.timesteps.tolist():
        eps = toy_epsilon(x, torch.full((16,), timestep / train_timesteps))
        if steps > 1:  # diffusers' stride is (T + 1) // steps, ours T / steps: equal unless steps = 1
            x = scheduler.step(eps, timestep, x, eta=0.0).prev_sample
        else:  # one step goes to abar = 1 either way
            x = scheduler.step(eps, timestep, x, eta=0.0).pred_original_sample
    ours = schedule.sample(toy_epsilon, z)
    assert torch.allclose(ours, x, rtol=1e-5, atol=1e-5), (ours - x).abs().max()


def test_one_step_sampler_by_hand():
    """T = 1: abar_0 = cos-schedule at 1/2 = 0.4936, and one DDIM step to abar_prev = 1 returns
    x0 = (x - sqrt(1 - abar) eps) / sqrt(abar)."""
    schedule = DDIMSchedule(1, 1)
    alpha_bar = cosine_alpha_bar(0.5)
    assert schedule.alpha_bar.tolist() == pytest.approx([alpha_bar], rel=1e-5)
    assert schedule.alpha_bar_prev.tolist() == [1.0] and schedule.timesteps.tolist() == [0]
    seen = []
    out = schedule.sample(lambda x, t: seen.append(t) or torch.full_like(x, 1.0), torch.tensor([[2.0, -1.0]]))
    expected = [(v - math.sqrt(1 - alpha_bar)) / math.sqrt(alpha_bar) for v in (2.0, -1.0)]
    assert out.squeeze(0).tolist() == pytest.approx(expected, rel=1e-5)
    assert seen[0].tolist() == [0.0]


def test_epsilon_loss_noises_as_ddpm_scheduler_and_regresses_the_noise():
    from diffusers import DDPMScheduler  # here: diffusers takes ~2.5 s to import at collection
    schedule = DDIMSchedule(10, 10)
    seen = {}

    def network(obs, x, t):
        seen["obs"], seen["x"], seen["t"] = obs, x, t
        return 0.5 * x

    obs, actions = torch.randn(4, OBS_DIM), torch.randn(4, ACT_DIM)
    t = torch.tensor([[0.0, 0.05], [0.1, 0.55], [0.95, 0.999], [0.3, 0.7]])
    noise = torch.randn(4, 2, ACT_DIM)
    error = schedule.epsilon_error(network, obs, actions, t, noise)
    timesteps = torch.tensor([[0, 0], [1, 5], [9, 9], [3, 7]])  # floor(t T)
    ddpm = DDPMScheduler(num_train_timesteps=11, beta_schedule="squaredcos_cap_v2")  # T + 1, the last never drawn
    noisy = ddpm.add_noise(actions.unsqueeze(1).expand(4, 2, ACT_DIM).reshape(8, ACT_DIM), noise.reshape(8, ACT_DIM),
                           timesteps.reshape(-1))
    assert torch.allclose(seen["x"], noisy, atol=1e-6)
    assert torch.equal(seen["t"], timesteps.reshape(-1).float() / 10)
    assert torch.equal(seen["obs"], obs.repeat_interleave(2, dim=0))
    assert torch.allclose(error, (0.5 * noisy - noise.reshape(8, ACT_DIM)).square().mean(-1).view(4, 2), atol=1e-6)


def test_stage_zero_bypasses_the_ddim_decoder_exactly():
    head = LatentDecoderHead(OBS_DIM, ACT_DIM, hidden_sizes=(16,), decoder_hidden_sizes=(16, 16), decoder="ddim")
    obs, z = torch.randn(64, OBS_DIM), 3 * torch.randn(64, ACT_DIM)
    assert torch.equal(head.decode(obs, z), z)
    with torch.no_grad():
        action, record = head.sample(obs)
    assert torch.equal(action, torch.tanh(record["z"]))
    assert torch.equal(head.act(obs), torch.tanh(head.distribution(obs)[0]))
    # the bypass is part of the checkpoint: a stage-0 policy reloads as the identity
    rebuilt = head_from_spec(head.spec())
    rebuilt.load_state_dict(head.state_dict())
    assert torch.equal(rebuilt.decode(obs, z), z)
    # why the bypass: a zero noise network under DDIM scales z by 1 / sqrt(abar_{T-1}) (7.1 at T = 10)
    unbypassed = LatentDecoderHead(OBS_DIM, ACT_DIM, hidden_sizes=(16,), decoder_hidden_sizes=(16,), decoder="ddim",
                                   zero_init_decoder=False)
    unbypassed.load_decoder({k: torch.zeros_like(v) for k, v in unbypassed.decoder.state_dict().items()})
    scale = 1 / unbypassed.schedule.alpha_bar[0].sqrt()
    assert scale == pytest.approx(1 / math.sqrt(cosine_alpha_bar(10 / 11)), rel=1e-4) and 7 < scale < 7.2
    assert torch.allclose(unbypassed.decode(obs, z), z * scale, rtol=1e-4)
    # a distilled decoder ends the bypass, also in a reloaded checkpoint
    head.load_decoder(head.new_decoder().state_dict())
    assert not torch.equal(head.decode(obs, z), z)
    rebuilt.load_state_dict(head.state_dict())
    assert torch.equal(rebuilt.decode(obs, z), head.decode(obs, z))


def test_the_ddim_decoder_learns_a_bimodal_target_from_the_gaussian_prior():
    """As the flow decoder's test in test_gorl.py: pre-tanh actions at -1.5 or +1.5 in every state."""
    head = LatentDecoderHead(2, 1, hidden_sizes=(8,), decoder_hidden_sizes=(64, 64), decoder="ddim")
    generator = torch.Generator().manual_seed(1)
    obs = torch.randn(2048, 2, generator=generator)
    sign = torch.randint(0, 2, (2048, 1), generator=generator).float() * 2 - 1
    actions = 1.5 * sign + 0.1 * torch.randn(2048, 1, generator=generator)
    weights, report = DecoderTraining(epochs=25, batch_size=128, lr=3e-3, patience=40).fit(head, obs, actions, seed=0)
    assert report["best_val_loss"] < 0.5 * report["history"][0]["val_loss"]
    head.load_decoder(weights)
    with torch.no_grad():
        out = head.decode(torch.randn(2000, 2), torch.randn(2000, 1)).squeeze(-1)
    near_plus, near_minus = ((out - 1.5).abs() < 0.5).float().mean(), ((out + 1.5).abs() < 0.5).float().mean()
    assert near_plus > 0.3 and near_minus > 0.3, (near_plus, near_minus)
    assert (out.abs() < 0.5).float().mean() < 0.1


def test_config_names_a_bad_decoder_or_too_few_timesteps():
    from genpol.api import compose_config
    from genpol.configure import validate

    with pytest.raises(ConfigError, match="policy.decoder"):
        validate(compose_config(["env=multigoal", "policy=gorl", "policy.decoder=ddpm"]))
    with pytest.raises(ConfigError, match="policy.diffusion_timesteps"):
        validate(compose_config(["env=multigoal", "policy=gorl", "policy.decoder=ddim",
                                 "policy.diffusion_timesteps=15"]))
    # the head checks its arguments with its config's own check: the same message from Python as from Hydra
    with pytest.raises(ConfigError, match=r"policy.diffusion_timesteps must be a multiple of policy.integration_steps "
                                          r"\(4\) for the ddim decoder, got 10"):
        LatentDecoderHead(OBS_DIM, ACT_DIM, decoder="ddim", integration_steps=4)
    cfg = validate(compose_config(["env=multigoal", "policy=gorl", "policy.decoder=ddim"]))
    assert (cfg.policy.decoder, cfg.policy.integration_steps, cfg.policy.diffusion_timesteps) == ("ddim", 10, 10)


DDIM_ARGS = [*ARGS, "policy.decoder=ddim"]


@pytest.fixture(scope="module")
def ddim_run(tmp_path_factory):
    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.train import run_training

    run_dir = tmp_path_factory.mktemp("gorl_ddim") / "reference"
    return run_dir, run_training(validate(compose_config([*DDIM_ARGS, f"run_dir={run_dir}"])), run_dir)


def test_pipeline_gorl_with_the_ddim_decoder_through_a_stage_transition(ddim_run):
    from genpol.api import load_policy

    run_dir, summary = ddim_run
    collection = torch.load(run_dir / "stage_0" / "collection.pt", weights_only=True)
    assert summary["encoder_env_steps"] == 2048
    assert summary["total_env_steps"] == 2048 + collection["env_steps"] and collection["env_steps"] >= 1024
    # stage 0 (and its collection) ran the bypassed decoder
    best0 = load_policy_files(list_checkpoints(run_dir / "stage_0" / "best")[-1])[1]["head"]
    assert bool(best0["decoder_bypassed"])
    # the decoder was trained by the epsilon loss, with its own validation split and best epoch
    saved = torch.load(run_dir / "stage_0" / "decoder.pt", weights_only=True)
    report = saved["report"]
    assert report["val_samples"] == round(0.1 * collection["env_steps"]) and 1 <= report["best_epoch"] <= 4
    assert report["best_val_loss"] == min(row["val_loss"] for row in report["history"])
    assert summary["stages"][0]["decoder_best_val_loss"] == report["best_val_loss"]
    # stage 1 runs that decoder, not bypassed, with a fresh encoder
    for path in list_checkpoints(run_dir / "stage_1" / "checkpoints"):
        state = load_training_state(path)["head"]
        assert not bool(state["decoder_bypassed"])
        assert_trees_equal({k[len("decoder."):]: v for k, v in state.items() if k.startswith("decoder.")},
                           saved["decoder"])
    # the run's policy is the combined one: encoder mean, DDIM decoder, tanh
    policy = load_policy(run_dir)
    assert policy.head.decoder_kind == "ddim" and not bool(policy.head.decoder_bypassed)
    obs = torch.randn(8, 2)
    mean = policy.head.distribution(obs)[0]
    expected = torch.tanh(policy.head.schedule.sample(lambda x, t: policy.head.decoder(obs, x, t), mean))
    assert torch.equal(policy.act(obs), expected)
    assert math.isfinite(summary["eval_return_mean"])


def test_ddim_resume_mid_stage_after_sigkill_is_bit_identical(ddim_run, tmp_path):
    """As the flow run's test in test_gorl.py: the bypass flag and the DDIM decoder survive a kill -9."""
    reference, _ = ddim_run
    kill_mid_stage_1_and_resume(DDIM_ARGS, reference, tmp_path / "interrupted",
                                ("checkpoints", "stage_1/checkpoints", "stage_1/best", "stage_0/best"))

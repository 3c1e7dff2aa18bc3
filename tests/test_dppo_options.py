"""DPPO's code's choices as options of genpol's diffusion head and value network, against hand computations.

Each option settles one departure row of docs/fidelity.md (irom-lab/dppo, compared update by update in
bench/parity/dppo.py): ``policy.time_embedding=dppo``, ``policy.output_activation=false``,
``policy.time_mlp_activation=mish``, ``policy.critic_residual=true`` and ``policy.final_clamp=false``.
The defaults stay genpol's, and a head or critic saved before the options existed loads unchanged.
"""

from __future__ import annotations

import math

import pytest
import torch

from genpol.algorithms.registry import make_critic
from genpol.errors import ConfigError
from genpol.mish import Mish
from genpol.heads import DiffusionHead, head_from_spec
from genpol.heads.diffusion import DiffusionConfig
from genpol.nets import dppo_time_embedding, sinusoidal_time_embedding

from conftest import REPO

DOUBLE = torch.float64


def mish(x: torch.Tensor) -> torch.Tensor:
    """x tanh(softplus(x)), written out."""
    return x * torch.tanh(torch.log1p(torch.exp(x)))


def affine(x: torch.Tensor, layer: torch.nn.Linear) -> torch.Tensor:
    return x @ layer.weight.T + layer.bias


def residual_forward(x: torch.Tensor, body: torch.nn.Module, act, output_act) -> torch.Tensor:
    """A ResidualMLP written out from its weights: input layer, h + W2 act(W1 act(h)) per block, then
    ``output_act`` (the identity for DPPO's) and the output layer."""
    h = affine(x, body.input)
    for block in body.blocks:
        h = h + affine(act(affine(act(h), block[1])), block[3])
    return affine(output_act(h), body.output[1])


def test_dppo_time_embedding_is_their_formula_of_the_integer_timestep():
    """sin and cos of k * 10000^(-j / 7), j = 0..7, by hand in float64 at DDPM timesteps 0, 1, 7 and 19; the
    head embeds its timesteps so with the option, and genpol's 2^j pi k / 1000 by default."""
    half = 8
    for step in (0, 1, 7, 19):
        frequencies = [10000.0 ** (-j / (half - 1)) for j in range(half)]
        expected = [math.sin(step * f) for f in frequencies] + [math.cos(step * f) for f in frequencies]
        got = dppo_time_embedding(torch.tensor([float(step)], dtype=DOUBLE), 2 * half)[0]
        assert torch.allclose(got, torch.tensor(expected, dtype=DOUBLE), rtol=0, atol=1e-13)
    head = DiffusionHead(3, 2, hidden_sizes=(8, 8, 8), time_embedding="dppo").double()
    assert torch.equal(head.denoiser.time_embedding(head.timesteps), dppo_time_embedding(head.timesteps, 16))
    x, obs = torch.randn(20, 2, dtype=DOUBLE), torch.randn(20, 3, dtype=DOUBLE)
    time_features = affine(mish(affine(dppo_time_embedding(head.timesteps, 16), head.denoiser.time_mlp[0])),
                           head.denoiser.time_mlp[2])
    expected_eps = residual_forward(torch.cat([x, time_features, obs], dim=-1), head.denoiser.body, mish, mish)
    assert torch.allclose(head.denoiser(x, head.timesteps, obs), expected_eps, rtol=1e-12, atol=1e-12)
    default = DiffusionHead(3, 2, hidden_sizes=(8, 8, 8))
    assert torch.equal(default.denoiser.time_embedding(default.timesteps),
                       sinusoidal_time_embedding(default.timesteps / 1000.0, 16))
    assert head_from_spec(head.spec()).config.time_embedding == "dppo"
    with pytest.raises(ConfigError, match="policy.time_embedding"):
        DiffusionHead(3, 2, time_embedding="fpo")  # a flow head's, for t in [0, 1]
    with pytest.raises(ConfigError, match="policy.time_dim"):
        DiffusionHead(3, 2, time_embedding="dppo", time_dim=2)  # their exponent divides by time_dim / 2 - 1


@pytest.mark.parametrize("output_activation", [False, True])
def test_the_denoiser_output_layer_has_no_activation_before_it_as_dppos(output_activation):
    """policy.output_activation=false: the body ends W_out h + b (DPPO's ResidualMLP); genpol's default
    applies Mish first. Both against the forward written out from the same weights."""
    head = DiffusionHead(3, 2, hidden_sizes=(8, 8, 8), output_activation=output_activation).double()
    inputs = torch.randn(6, 2 + 16 + 3, dtype=DOUBLE)
    expected = residual_forward(inputs, head.denoiser.body, mish, mish if output_activation else (lambda h: h))
    assert torch.allclose(head.denoiser.body(inputs), expected, rtol=1e-12, atol=1e-12)
    # the output layer keeps its state-dict key, so the weights of one load into the other
    assert "body.output.1.weight" in head.denoiser.state_dict()


@pytest.mark.parametrize("time_mlp_activation", [None, "mish"])
def test_the_time_mlp_is_mish_whatever_the_denoisers_activation_as_dppos(time_mlp_activation):
    """A ReLU denoiser (DPPO's Gym configs): policy.time_mlp_activation=mish makes the time MLP
    W2 mish(W1 e + b1) + b2 as theirs, the body stays ReLU; the default (null) follows the denoiser: ReLU."""
    head = DiffusionHead(3, 2, hidden_sizes=(8, 8, 8), activation="relu",
                         time_mlp_activation=time_mlp_activation).double()
    embedding = torch.randn(5, 16, dtype=DOUBLE)
    act = mish if time_mlp_activation == "mish" else torch.relu
    expected = affine(act(affine(embedding, head.denoiser.time_mlp[0])), head.denoiser.time_mlp[2])
    assert torch.allclose(head.denoiser.time_mlp(embedding), expected, rtol=1e-12, atol=1e-12)
    inputs = torch.randn(5, 2 + 16 + 3, dtype=DOUBLE)
    assert torch.allclose(head.denoiser.body(inputs), residual_forward(inputs, head.denoiser.body, torch.relu,
                                                                       torch.relu), rtol=1e-12, atol=1e-12)
    with pytest.raises(ConfigError, match="policy.time_mlp_activation"):
        DiffusionHead(3, 2, time_mlp_activation="swish")


def test_the_residual_critic_is_dppos_critic_obs():
    """policy.critic_residual=true: V(s) = W_out h + b_out with h = W_in s + b_in plus one pre-activation
    Mish block (their CriticObs, residual_style=True, 3 x 256 in every config: 3 x 8 here), by hand."""
    critic = make_critic(DiffusionConfig(critic_residual=True, critic_hidden_sizes=[8, 8, 8]), 5).double()
    obs = torch.randn(7, 5, dtype=DOUBLE)
    body = critic.net
    assert len(body.blocks) == 1
    h = affine(obs, body.input)
    h = h + affine(mish(affine(mish(h), body.blocks[0][1])), body.blocks[0][3])
    expected = affine(h, body.output[1]).squeeze(-1)
    assert torch.allclose(critic(obs), expected, rtol=1e-12, atol=1e-12)
    # the default stays the plain MLP: Linear, Mish, Linear, Mish, Linear, Mish, Linear
    plain = make_critic(DiffusionConfig(critic_hidden_sizes=[8, 8, 8]), 5).double()
    x = obs
    for i, layer in enumerate(plain.net):
        if isinstance(layer, torch.nn.Linear):
            x = affine(x, layer)
            x = mish(x) if i < len(plain.net) - 1 else x
    assert torch.allclose(plain(obs), x.squeeze(-1), rtol=1e-12, atol=1e-12)
    for sizes in ([8, 8], [8, 16, 8]):  # an even count leaves a width unused; blocks add equal widths
        with pytest.raises(ConfigError, match="policy.critic_hidden_sizes"):
            DiffusionConfig(critic_residual=True, critic_hidden_sizes=sizes)


def constant_denoiser(head: DiffusionHead, value: float) -> None:
    """The trainable denoiser predicts eps = ``value`` everywhere."""
    with torch.no_grad():
        for parameter in head.denoiser.parameters():
            parameter.zero_()
        head.denoiser.body.output[-1].bias.fill_(value)


@pytest.mark.parametrize("final_clamp", [False, True])
def test_the_final_state_is_stored_as_executed_and_its_log_prob_is_of_that_state(final_clamp):
    """Two DDPM steps, eps = -5: the last step's mean is x0_hat = clip((x_1 + 5 sqrt(1 - abar_0)) / sqrt(abar_0))
    (abar_prev = 1), its std the floor 0.1, so about half the final states leave the box. Unclamped
    (policy.final_clamp=false, DPPO's): the action, the stored state and the log-prob's argument are the drawn
    state; clamped (genpol's default): all three are its clamp to [-1, 1]. The log-prob is the Gaussian
    log-density of that state written out (clamped to [-5, 2]); from one seed both draw the same chain."""
    head = DiffusionHead(obs_dim=2, act_dim=1, denoising_steps=2, ft_denoising_steps=2, hidden_sizes=(8, 8, 8),
                         final_clamp=final_clamp)
    constant_denoiser(head, -5.0)
    obs = torch.zeros(256, 2)
    torch.manual_seed(0)
    action, record = head.sample(obs)
    x1, final = record["chain"][:, 1, 0].double(), record["chain"][:, 2, 0].double()
    abar0 = head.train_alphas_cumprod[0].double()
    mean = ((x1 + 5.0 * (1 - abar0).sqrt()) / abar0.sqrt()).clamp(-1.0, 1.0)
    torch.manual_seed(0)  # the same draws again: x_2, then one noise tensor per step
    x2 = torch.randn(256, 1)
    torch.randn(256, 1)
    drawn = mean + 0.1 * torch.randn(256, 1).clamp(-3.0, 3.0)[:, 0].double()
    assert (drawn.abs() > 1).double().mean() > 0.3  # the case the option is about
    expected_final = drawn.clamp(-1.0, 1.0) if final_clamp else drawn
    assert torch.allclose(final, expected_final, rtol=0, atol=1e-6)
    assert torch.equal(record["chain"][:, 0], x2)
    assert torch.equal(action, record["chain"][:, 2])  # what the env wrapper receives (and clips)
    log_density = (-0.5 * ((final - mean) / 0.1) ** 2 - math.log(0.1) - 0.5 * math.log(2 * math.pi)).clamp(-5, 2)
    assert torch.allclose(record["log_prob"][:, 1].double(), log_density, rtol=0, atol=1e-4)
    assert torch.equal(head.log_ratio(obs, record).log_ratio, torch.zeros(256, 2))
    torch.manual_seed(0)
    assert torch.equal(head.rsample(obs).detach(), action)  # rsample follows the same option


def test_a_head_and_critic_saved_before_the_options_load_with_genpols_behaviour():
    """A spec without the new keys rebuilds genpol's head (genpol's embedding, activations and clamp),
    whose weights load strictly; so does the plain critic; and the EXPO run saved before the layer change
    (tests/data/saved_before_layers: a diffusion base policy) loads as a policy."""
    from genpol.policy import TrainedPolicy

    head = DiffusionHead(4, 2, hidden_sizes=(8, 8, 8), activation="relu")
    spec = head.spec()
    new_keys = ("time_embedding", "output_activation", "time_mlp_activation", "final_clamp")
    spec["kwargs"] = {key: value for key, value in spec["kwargs"].items() if key not in new_keys}
    rebuilt = head_from_spec(spec)
    rebuilt.load_state_dict(head.state_dict())
    config = rebuilt.config
    assert (config.time_embedding, config.output_activation, config.time_mlp_activation, config.final_clamp) == \
        ("genpol", True, None, True)
    assert isinstance(rebuilt.denoiser.time_mlp[1], torch.nn.ReLU)
    assert isinstance(rebuilt.denoiser.body.output[0], torch.nn.ReLU)
    obs = torch.randn(3, 4)
    assert torch.equal(rebuilt.act(obs), head.act(obs))
    critic = make_critic(DiffusionConfig(), 4)
    make_critic(DiffusionConfig(), 4).load_state_dict(critic.state_dict())
    assert not DiffusionConfig().critic_residual

    checkpoint = next((REPO / "tests/data/saved_before_layers/expo/checkpoints").iterdir())
    base = TrainedPolicy.load(checkpoint).head.base
    assert base.config.time_embedding == "genpol" and base.config.final_clamp
    assert isinstance(base.denoiser.body.output[0], Mish)  # genpol's activation before the output layer


def test_the_options_are_keys_of_the_policy_group():
    """Hydra's policy=diffusion schema is DiffusionConfig: each option is a command-line key."""
    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.heads import build_head

    cfg = validate(compose_config(["run_dir=/tmp/x", "policy=diffusion", "env=hopper", "policy.ft_denoising_steps=20",
                                   "policy.hidden_sizes=[8,8,8]", "policy.time_embedding=dppo",
                                   "policy.output_activation=false", "policy.time_mlp_activation=mish",
                                   "policy.final_clamp=false", "policy.critic_residual=true"]))
    head = build_head(cfg.policy.family, 11, 12, **cfg.policy.head_kwargs())
    assert (head.config.time_embedding, head.config.output_activation, head.config.time_mlp_activation,
            head.final_clamp) == ("dppo", False, "mish", False)
    assert make_critic(cfg.policy, 11).net.output[1].out_features == 1

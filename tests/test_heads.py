"""Contract tests every policy head passes, plus each head's math against an independent oracle.

A new head joins the contract by adding one line to ``HEAD_FACTORIES``.
"""

import io
import sys

import pytest
import torch

from conftest import REPO

from genpol.heads.chunking import ChunkedActions, imitation_horizon
from genpol.heads import ConsistencyHead, DiffusionHead, FPOHead, GaussianHead, HeadCapabilityError, PolicyFlowHead, TanhGaussianHead, head_from_spec
from genpol.heads.latent import LatentDecoderHead
from genpol.heads.normalizing_flow import NormalizingFlowHead
from genpol.heads.energy_flow import EnergyFlowHead
from genpol.heads.vp_diffusion import VPDiffusionHead

sys.path.insert(0, str(REPO / "docs" / "examples"))
from laplace_head import LaplaceHead  # noqa: E402 - the docs tutorial's head joins the contract too

OBS_DIM, ACT_DIM, BATCH = 5, 3, 32

HEAD_FACTORIES = {
    # MaxEntDP's continuous-time VP diffusion: its on-policy ratio is the exact chain, one unit per noisy step
    "vp-diffusion": lambda: VPDiffusionHead(OBS_DIM, ACT_DIM, sampling_steps=4, hidden_sizes=(32, 32),
                                            time_hidden_sizes=(16,), time_dim=8),
    "gaussian": lambda: GaussianHead(OBS_DIM, ACT_DIM, hidden_sizes=(32, 32), log_std_init=-0.5),
    "laplace-tutorial": lambda: LaplaceHead(OBS_DIM, ACT_DIM, hidden=16),
    "fpo": lambda: FPOHead(OBS_DIM, ACT_DIM, hidden_sizes=(16, 16), n_mc=4),
    "fpo-per-sample": lambda: FPOHead(OBS_DIM, ACT_DIM, hidden_sizes=(16, 16), n_mc=4, ratio_mode="per_sample",
                                      t_sampling="uniform"),
    "tanh-gaussian": lambda: TanhGaussianHead(OBS_DIM, ACT_DIM, hidden_sizes=(32, 32)),
    "tanh-gaussian-rlpd": lambda: TanhGaussianHead(OBS_DIM, ACT_DIM, hidden_sizes=(32,), log_prob_epsilon=0.0, init="xavier_uniform"),
    "policyflow": lambda: PolicyFlowHead(OBS_DIM, ACT_DIM, hidden_sizes=(16, 16)),
    "policyflow-degenerate": lambda: PolicyFlowHead(OBS_DIM, ACT_DIM, hidden_sizes=(16,), degenerate_to_gaussian=True),
    "diffusion-ddpm": lambda: DiffusionHead(OBS_DIM, ACT_DIM, denoising_steps=6, ft_denoising_steps=3,
                                            hidden_sizes=(32, 32, 32), min_sampling_std=0.2),
    "diffusion-ddim-chunk": lambda: DiffusionHead(OBS_DIM, ACT_DIM, act_steps=3, horizon_steps=4, denoising_steps=20,
                                                  use_ddim=True, ddim_steps=4, ft_denoising_steps=4,
                                                  hidden_sizes=(32, 32, 32)),
    "consistency": lambda: ConsistencyHead(OBS_DIM, ACT_DIM, hidden_sizes=(32, 32, 32)),
    "consistency-chunk": lambda: ConsistencyHead(OBS_DIM, ACT_DIM, act_steps=3, horizon_steps=4, hidden_sizes=(32,)),
    "consistency-3-step-huber": lambda: ConsistencyHead(OBS_DIM, ACT_DIM, hidden_sizes=(32,), sampling_steps=3,
                                                        ct_distance="pseudo_huber", min_sampling_std=0.3, scale_input=False),
    # GoRL: a trained (non-zero) decoder, so the contract covers the decoder's path too
    "gorl": lambda: _trained_decoder(LatentDecoderHead(OBS_DIM, ACT_DIM, hidden_sizes=(16, 16),
                                                       decoder_hidden_sizes=(16, 16), latent_l2_coef=1e-3)),
    # couplings randomized (they start as the identity), so the contract sees a non-Gaussian flow
    "normalizing-flow": lambda: _randomized_couplings(NormalizingFlowHead(OBS_DIM, ACT_DIM, hidden_sizes=(32,),
                                                                          coupling_layers=3,
                                                                          coupling_hidden_sizes=(16,))),
    # MEow's energy-based flow, every weight moved off its zero-weight start (a state-dependent base and shifts)
    "energy-flow": lambda: _randomized_couplings(EnergyFlowHead(OBS_DIM, ACT_DIM, base_hidden_sizes=(16,),
                                                                coupling_hidden_sizes=(16,), shift_hidden_sizes=(16,)),
                                                 every_parameter=True),
    "gorl-identity": lambda: LatentDecoderHead(OBS_DIM, ACT_DIM, hidden_sizes=(16,), decoder_hidden_sizes=(16,)),
    # GoRL's DDIM decoder, distilled (not bypassed), so the contract runs the DDIM sampler
    "gorl-ddim": lambda: _distilled_decoder(LatentDecoderHead(OBS_DIM, ACT_DIM, hidden_sizes=(16,),
                                                              decoder_hidden_sizes=(16, 16), decoder="ddim",
                                                              integration_steps=5)),
}


def _randomized_couplings(head, every_parameter=False):
    with torch.no_grad():
        for parameter in (head.parameters() if every_parameter else
                          (p for coupling in head.couplings for p in coupling.parameters())):
            parameter.normal_(0.0, 0.3)
    return head


def _trained_decoder(head):
    head.decoder.load_state_dict(head.new_decoder().state_dict())
    return head


def _distilled_decoder(head):
    """A decoder fitted briefly by GoRL's own distillation: an untrained DDIM epsilon network decodes
    to |a| of ~10-100, which tanh saturates to exactly +-1, and sampling checks need distinct actions."""
    from genpol.pipelines.gorl.distill import DecoderTraining

    generator = torch.Generator().manual_seed(0)
    obs = torch.randn(512, OBS_DIM, generator=generator)
    actions = 0.5 * torch.randn(512, ACT_DIM, generator=generator)
    weights, _ = DecoderTraining(epochs=10, batch_size=64, lr=3e-3).fit(head, obs, actions, seed=0)
    head.load_decoder(weights)
    return head


@pytest.fixture(params=sorted(HEAD_FACTORIES))
def head(request):
    torch.manual_seed(0)
    return HEAD_FACTORIES[request.param]()


def observations(seed=1):
    return torch.randn(BATCH, OBS_DIM, generator=torch.Generator().manual_seed(seed))


def test_log_ratio_is_exactly_zero_right_after_sampling(head):
    obs = observations()
    with torch.no_grad():
        _, record = head.sample(obs)
    head.begin_update()
    terms = head.log_ratio(obs, record)
    assert terms.log_ratio.ndim == 2 and terms.log_ratio.shape[0] == BATCH
    assert torch.equal(terms.log_ratio, torch.zeros_like(terms.log_ratio))


def test_shapes_and_record_batch_dim(head):
    obs = observations()
    with torch.no_grad():
        action, record = head.sample(obs)
    assert action.shape == (BATCH, ACT_DIM) and action.dtype == torch.float32
    assert all(value.shape[0] == BATCH for value in record.values())
    assert head.act(obs, deterministic=True).shape == (BATCH, ACT_DIM)
    assert head.act(obs, deterministic=False).shape == (BATCH, ACT_DIM)
    terms = head.log_ratio(obs, record)
    if terms.entropy is not None:
        assert terms.entropy.shape == (BATCH,)
    act_steps = head.act_steps if isinstance(head, ChunkedActions) else 1
    expert_chunk = torch.rand(BATCH, imitation_horizon(head) * (ACT_DIM // act_steps)) * 2 - 1
    loss = head.imitation_loss(obs, expert_chunk)
    assert loss.ndim == 0 and torch.isfinite(loss)


def test_log_ratio_is_differentiable_and_moves_with_parameters(head):
    obs = observations()
    with torch.no_grad():
        _, record = head.sample(obs)
        head.begin_update()
        for parameter in head.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    terms = head.log_ratio(obs, record)
    assert terms.log_ratio.abs().max() > 0
    terms.log_ratio.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in head.parameters())


def test_sampling_is_deterministic_under_a_seed(head):
    obs = observations()
    with torch.no_grad():
        torch.manual_seed(7)
        a1, r1 = head.sample(obs)
        torch.manual_seed(7)
        a2, r2 = head.sample(obs)
        a3, _ = head.sample(obs)
    assert torch.equal(a1, a2) and all(torch.equal(r1[k], r2[k]) for k in r1)
    assert not torch.equal(a1, a3)
    assert torch.equal(head.act(obs), head.act(obs))


def test_a_states_deterministic_action_does_not_depend_on_its_batch(head):
    """``act(s, deterministic=True)`` is a function of s: alone, or third in a batch of 32, the same action
    (to float rounding: GEMM kernels pick their path by the batch). Heads that draw seeded noise share one
    draw across the batch; drawn per row, a state's noise moved with the batch size and its place in it."""
    obs = observations()
    with torch.no_grad():
        in_batch = head.act(obs, deterministic=True)[2]
        alone = head.act(obs[2:3], deterministic=True)[0]
    torch.testing.assert_close(alone, in_batch, rtol=1e-4, atol=1e-5)


def test_stochastic_act_of_an_on_policy_head_is_the_policy_sample_draws(head):
    """After ``act_as_sampled`` (what an on-policy learner calls), ``act(deterministic=False)`` draws the action
    ``sample`` draws under the same seed, also in a head rebuilt from its saved weights: a stochastic evaluation
    of a PPO-trained head is the policy PPO's ratio trained. The consistency head's stochastic act was its
    reference sampler (action std 0.117 against the chain's 0.156) until 2026-12-07."""
    obs = observations()
    head.act_as_sampled()
    buffer = io.BytesIO()
    torch.save(head.state_dict(), buffer)
    buffer.seek(0)
    rebuilt = head_from_spec(head.spec())
    rebuilt.load_state_dict(torch.load(buffer, weights_only=True))
    with torch.no_grad():
        torch.manual_seed(11)
        sampled, _ = head.sample(obs)
        for acting in (head, rebuilt):
            torch.manual_seed(11)
            assert torch.equal(acting.act(obs, deterministic=False), sampled)


def test_each_hyperparameter_is_written_once_in_the_heads_config(head):
    """The head's Config is its policy group's schema and its constructor's arguments: spec_kwargs is the
    Config's fields less the family and the critic's, a spec rebuilds an equal Config, and the
    registry's schema for a genpol head is that class (no second copy in genpol.config)."""
    import dataclasses

    from genpol.config import POLICY_SCHEMAS
    from genpol.heads.base import HeadConfig

    config = head.config
    assert isinstance(config, type(head).Config) and issubclass(type(head).Config, HeadConfig)
    fields = {f.name for f in dataclasses.fields(config)} - HeadConfig.NOT_HEAD_ARGUMENTS
    assert set(head.spec_kwargs) == fields and head.spec_kwargs == config.head_kwargs()
    assert head_from_spec(head.spec()).config == dataclasses.replace(config, **config.head_kwargs())
    if head.family in POLICY_SCHEMAS:
        assert POLICY_SCHEMAS[head.family] is type(head).Config and type(head).Config.family == head.family


def test_save_load_round_trip(head):
    """Weights through torch.save / torch.load(weights_only=True) into a head rebuilt from its spec."""
    obs = observations()
    buffer = io.BytesIO()
    torch.save(head.state_dict(), buffer)
    buffer.seek(0)
    torch.manual_seed(123)  # the rebuilt head starts from different random weights
    rebuilt = head_from_spec(head.spec())
    rebuilt.load_state_dict(torch.load(buffer, weights_only=True))
    assert torch.equal(rebuilt.act(obs), head.act(obs))
    with torch.no_grad():
        _, record = head.sample(obs)
    head.begin_update()
    torch.manual_seed(5)  # heads may draw random evaluation points inside log_ratio
    expected = head.log_ratio(obs, record).log_ratio
    torch.manual_seed(5)
    assert torch.equal(rebuilt.log_ratio(obs, record).log_ratio, expected)


def test_exact_kl_is_zero_at_the_sampling_parameters(head):
    obs = observations()
    with torch.no_grad():
        _, record = head.sample(obs)
    head.begin_update()
    if not head.has_exact_kl:
        with pytest.raises(HeadCapabilityError):
            head.kl(obs, record)
        return
    assert torch.allclose(head.kl(obs, record), torch.zeros(BATCH), atol=1e-7)


# ----------------------------------------------------------------------------------- Gaussian math
def test_gaussian_log_ratio_kl_entropy_and_nll_match_torch_distributions():
    torch.manual_seed(0)
    head = GaussianHead(OBS_DIM, ACT_DIM, hidden_sizes=(16,), log_std_init=-0.3)
    obs = observations()
    with torch.no_grad():
        action, record = head.sample(obs)
        head.log_std.add_(torch.tensor([0.1, -0.2, 0.3]))  # the record must not follow this change
        head.mean_net[-1].bias.add_(0.2)
        old = torch.distributions.Normal(record["mean"], torch.full((ACT_DIM,), -0.3).exp())
        new = torch.distributions.Normal(head.mean_net(obs), head.log_std.exp())
    expected_log_ratio = (new.log_prob(action) - old.log_prob(action)).sum(-1, keepdim=True)
    terms = head.log_ratio(obs, record)
    assert torch.allclose(terms.log_ratio, expected_log_ratio, atol=1e-5)
    assert torch.allclose(head.kl(obs, record), torch.distributions.kl_divergence(old, new).sum(-1), atol=1e-5)
    assert torch.allclose(terms.entropy, new.entropy().sum(-1), atol=1e-5)
    assert torch.allclose(head.imitation_loss(obs, action), -new.log_prob(action).sum(-1).mean(), atol=1e-5)
    assert torch.allclose(record["log_prob"], old.log_prob(action).sum(-1), atol=1e-5)


def test_every_registered_head_family_is_in_the_contract():
    """A head registered in ``HEADS`` without a line in ``HEAD_FACTORIES`` would escape these tests."""
    from genpol.heads import HEADS

    covered = {factory().family for factory in HEAD_FACTORIES.values()}
    acting_only = {"expo", "softmax_q"}  # act and reload only (tests/test_expo.py, tests/test_softmax_q.py)
    assert set(HEADS) - acting_only <= covered, sorted(set(HEADS) - acting_only - covered)

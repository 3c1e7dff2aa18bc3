"""The normalizing-flow head against independent math: its log-density is the change of variables
computed with autograd's full Jacobian, its inverse undoes its forward map, it starts as SAC's
tanh-Gaussian, and SAC trains it on Pendulum through the unchanged learner."""

import pytest
import torch

from genpol.heads.normalizing_flow import NormalizingFlowHead
from genpol.heads.tanh_gaussian import TanhGaussianHead

OBS_DIM, ACT_DIM = 4, 3


def randomized(head):
    with torch.no_grad():
        for coupling in head.couplings:
            for parameter in coupling.parameters():
                parameter.normal_(0.0, 0.4)
    return head


def test_log_prob_is_the_change_of_variables_of_the_full_jacobian():
    """log pi(a) = log N(z) - log|det da/dz|, with da/dz from torch.autograd.functional.jacobian of the
    whole map z -> tanh(flow(z)) per sample (float64, exact form of the tanh term)."""
    torch.manual_seed(0)
    head = randomized(NormalizingFlowHead(OBS_DIM, ACT_DIM, hidden_sizes=(16,), coupling_layers=3,
                                          coupling_hidden_sizes=(16,), log_prob_epsilon=0.0)).double()
    obs = torch.randn(5, OBS_DIM, dtype=torch.float64)
    torch.manual_seed(1)
    action, log_prob = head.rsample_log_prob(obs)
    torch.manual_seed(1)
    z = torch.randn(5, ACT_DIM, dtype=torch.float64)
    for i in range(5):
        def to_action(zi, i=i):
            return torch.tanh(head.flow(obs[i:i + 1], zi.unsqueeze(0))[0]).squeeze(0)

        jacobian = torch.autograd.functional.jacobian(to_action, z[i])
        expected = (torch.distributions.Normal(0.0, 1.0).log_prob(z[i]).sum()
                    - torch.linalg.slogdet(jacobian).logabsdet)
        assert torch.allclose(to_action(z[i]), action[i], atol=1e-12)
        assert torch.allclose(log_prob[i], expected, atol=1e-9), (log_prob[i], expected)
    # the same density by the inverse pass, from the pre-tanh action (log_ratio's path), and from the
    # action alone (atanh) where no action is saturated at the clip of +-(1 - 1e-6)
    pre_tanh = head.flow(obs, z)[0]
    exact_tanh = 2 * (torch.log(torch.tensor(2.0, dtype=torch.float64)) - pre_tanh
                      - torch.nn.functional.softplus(-2 * pre_tanh)).sum(-1)
    assert torch.allclose(head.flow_log_prob(obs, pre_tanh) - exact_tanh, log_prob, atol=1e-9)
    inside = action.abs().amax(-1) < 0.999
    assert inside.sum() >= 2 and torch.allclose(head.log_prob(obs, action)[inside], log_prob[inside], atol=1e-6)


def test_the_couplings_invert_exactly_and_start_as_the_identity():
    torch.manual_seed(0)
    head = NormalizingFlowHead(OBS_DIM, ACT_DIM, hidden_sizes=(16,), coupling_layers=4, coupling_hidden_sizes=(16,))
    obs, z = torch.randn(7, OBS_DIM), torch.randn(7, ACT_DIM)
    mean, log_std = head.base_affine(obs)
    u, _ = head.flow(obs, z)
    assert torch.equal(u, mean + log_std.exp() * z)  # zero-initialized couplings: the base affine alone
    randomized(head)
    u, log_det = head.flow(obs, z)
    x = u
    for coupling in reversed(head.couplings):
        x, _ = coupling.inverse(x, obs)
    assert torch.allclose(x, mean + log_std.exp() * z, atol=1e-5)


def test_untrained_it_is_sacs_tanh_gaussian():
    """With the base affine's weights copied into a tanh-Gaussian head (mu and log sigma rows of one
    output layer), the same seed gives the same actions and log-probs."""
    torch.manual_seed(0)
    flow = NormalizingFlowHead(OBS_DIM, ACT_DIM, hidden_sizes=(32, 32))
    gaussian = TanhGaussianHead(OBS_DIM, ACT_DIM, hidden_sizes=(32, 32))
    flow_linears = [m for m in flow.base.modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for source, target in zip(flow_linears[:2], [m for m in gaussian.latent_pi if isinstance(m, torch.nn.Linear)]):
            target.weight.copy_(source.weight)
            target.bias.copy_(source.bias)
        out = flow_linears[-1]
        gaussian.mu.weight.copy_(out.weight[:ACT_DIM]), gaussian.mu.bias.copy_(out.bias[:ACT_DIM])
        gaussian.log_std.weight.copy_(out.weight[ACT_DIM:]), gaussian.log_std.bias.copy_(out.bias[ACT_DIM:])
    obs = torch.randn(6, OBS_DIM)
    torch.manual_seed(3)
    a_flow, logp_flow = flow.rsample_log_prob(obs)
    torch.manual_seed(3)
    a_gauss, logp_gauss = gaussian.rsample_log_prob(obs)
    assert torch.allclose(a_flow, a_gauss, atol=1e-6) and torch.allclose(logp_flow, logp_gauss, atol=1e-4)


def test_rlpd_bundle_composes_with_the_flow_head():
    """+experiment=rlpd policy=normalizing_flow: the bundle's policy keys (RLPD's init, exact tanh term)
    are the flow head's too, and xavier init leaves the couplings' output layers at zero."""
    from genpol.api import compose_config
    from genpol.build import make_head
    from genpol.configure import validate

    config = validate(compose_config(["+experiment=rlpd", "policy=normalizing_flow", "env=hopper", "run_dir=/tmp/x",
                                      "dataset.path=/tmp/data.hdf5"]))
    assert (config.policy.init, config.policy.log_prob_epsilon, config.learner.name) == ("xavier_uniform", 0.0, "sac")
    head = make_head(config.policy, OBS_DIM, ACT_DIM)
    assert all(float(p.detach().abs().sum()) == 0.0 for c in head.couplings for p in c.output.parameters())


def test_bad_hyperparameters_name_the_key():
    from genpol.errors import ConfigError

    with pytest.raises(ConfigError, match=r"policy.scale_clamp must be > 0, got 0"):
        NormalizingFlowHead(OBS_DIM, ACT_DIM, scale_clamp=0)


def test_sac_trains_the_flow_head_unchanged(tmp_path):
    """policy=normalizing_flow learner=sac on Pendulum: a short run ends finite, with the entropy term
    from the flow's exact log-prob, checkpointed and reloadable."""
    from genpol.api import load_policy, train

    summary = train(env="pendulum", policy="normalizing_flow", learner="sac", total_steps=768, run_dir=tmp_path / "run",
                    seed=0, overrides=["pipeline.video=false", "logger.progress_bar=false", "pipeline.eval_episodes=1",
                                       "learner.learning_starts=256", "learner.iteration_steps=256",
                                       "learner.batch_size=64", "policy.hidden_sizes=[32,32]",
                                       "policy.coupling_layers=2", "learner.critic_hidden_sizes=[32,32]"])
    assert summary["env_steps"] == 768 and torch.isfinite(torch.tensor(summary["eval_return_mean"]))
    policy = load_policy(tmp_path / "run")
    assert type(policy.head).__name__ == "NormalizingFlowHead" and len(policy.head.couplings) == 2

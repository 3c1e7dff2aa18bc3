"""Offline Consistency-AC (``pipeline=offline_to_online`` with ``learner=consistency_ac``): the offline
phase's gradient step against an independent computation, its exact resume, and one run through both
phases in which the offline learner (critics, EMA actor) goes on online."""

import copy
import io
import json

import numpy as np
import pytest
import torch

from genpol.algorithms.qgradient import QGradientActor
from genpol.callbacks.base import Callback
from genpol.config.offpolicy import QGradientConfig
from genpol.heads import ConsistencyHead
from genpol.runners.offline_rl import OfflineRLRunner
from genpol.storage.replay import OfflineReplay
from tests.conftest import assert_trees_equal

OBS_DIM, ACT_DIM, ROWS = 3, 2, 40
LR, MAX_NORM, GAMMA, ETA, BC = 1e-3, 1.0, 0.99, 0.5, 2.0


def offline_store(seed=0):
    """40 synthetic transitions: row i -> row i + 1, a terminal every 10 rows."""
    generator = torch.Generator().manual_seed(seed)
    observations = torch.randn(ROWS + 1, OBS_DIM, generator=generator)
    actions = torch.rand(ROWS + 1, ACT_DIM, generator=generator) * 2 - 1
    rewards = torch.randn(ROWS + 1, generator=generator)
    terminals = (torch.arange(ROWS + 1) % 10 == 9)
    rows = torch.arange(ROWS)
    return OfflineReplay(observations, actions, rewards, terminals, rows, rows + 1, checksum=7, seed=seed)


def make(seed=0, offline_lr_decay=False):
    torch.manual_seed(seed)
    cfg = QGradientConfig(batch_size=8, critic_hidden_sizes=[16], eta=ETA, bc_coef=BC, lr=LR, max_grad_norm=MAX_NORM,
                          actor_ema_start=2, actor_ema_every=1, act_candidates=3, learning_starts=5,
                          offline_lr_decay=offline_lr_decay)
    head = ConsistencyHead(OBS_DIM, ACT_DIM, hidden_sizes=(16, 16))
    offline = offline_store(seed)
    algorithm = QGradientActor(head, cfg, total_steps=100, num_envs=1, obs_dim=OBS_DIM, act_dim=ACT_DIM, capacity=64,
                               device=torch.device("cpu"), seed=seed)
    return algorithm, offline


class Killed(Exception):
    pass


class KilledAfter(Callback):
    """Ends the run at the end of iteration ``iterations``, as a kill right after its checkpoint would."""

    def __init__(self, iterations):
        self.iterations = iterations

    def on_iteration_end(self, runner, metrics):
        if runner.iteration == self.iterations:
            raise Killed


def first_adam_step(parameters, loss):
    """The change Adam's first step makes (bias-corrected m / sqrt(v) = g / |g|) after the norm clip:
    -lr c g / (c |g| + 1e-8), c = min(1, max_norm / (||g|| + 1e-6))."""
    grads = torch.autograd.grad(loss, parameters, allow_unused=True, retain_graph=True)
    grads = [torch.zeros_like(p) if g is None else g for p, g in zip(parameters, grads)]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = min(1.0, MAX_NORM / (norm.item() + 1e-6))
    return [-LR * scale * g / (scale * g.abs() + 1e-8) for g in grads]


def test_one_offline_step_is_a_td_step_and_a_ct_plus_eta_q_step_on_dataset_batches():
    """The step draws a dataset batch (no env step), moves the critics along the TD loss with the EMA
    actor's next actions, then the actor along 2 CT + 0.5 L_Q with the updated critics, as Adam's first
    step does (every parameter by lr x the sign of its gradient). The CT loss alone would move it otherwise."""
    algorithm, offline = make()
    head_before, critic_before = copy.deepcopy(algorithm.head), copy.deepcopy(algorithm.critic)
    ema_before, target_before = copy.deepcopy(algorithm.ema_head), copy.deepcopy(algorithm.critic_target)
    offline_state, pair_state = offline.generator.get_state(), algorithm.pair_generator.get_state()
    runner = OfflineRLRunner(algorithm, offline, steps=1, batch_size=8, log_every=1)
    torch.manual_seed(5)
    runner.run()
    assert len(algorithm.replay) == 0 and algorithm.env_steps == 0 and algorithm.offline_steps == 1

    # the same draws, recomputed from the formulas
    offline.generator.set_state(offline_state)
    batch = offline.sample(8)
    torch.manual_seed(5)
    with torch.no_grad():
        next_q = target_before(batch.next_obs, ema_before.rsample(batch.next_obs)).min(dim=0).values
        target = batch.rewards + GAMMA * (1 - batch.dones) * next_q
    critic_params = list(critic_before.parameters())
    td_loss = 0.5 * ((critic_before(batch.obs, batch.actions) - target) ** 2).mean(dim=1).sum()
    for before, change, after in zip(critic_params, first_adam_step(critic_params, td_loss),
                                     algorithm.critic.parameters()):
        assert torch.allclose(after, before + change, atol=1e-6)

    q = algorithm.critic(batch.obs, head_before.rsample(batch.obs))  # the critics after their step
    i, j = torch.randperm(2, generator=torch.Generator().set_state(pair_state)).tolist()
    q_loss = -q[i].mean() / q[j].abs().mean().detach()
    ct_loss = head_before.imitation_loss(batch.obs, batch.actions)
    actor_params = list(head_before.network.parameters())
    joint = first_adam_step(actor_params, BC * ct_loss + ETA * q_loss)
    bc_only = first_adam_step(actor_params, BC * ct_loss)
    for before, change, after in zip(actor_params, joint, algorithm.head.network.parameters()):
        assert torch.allclose(after, before + change, atol=1e-6)
    moved = torch.cat([(after - before).flatten()
                       for before, after in zip(actor_params, algorithm.head.network.parameters())])
    assert not torch.allclose(moved, torch.cat([c.flatten() for c in bc_only]), atol=1e-6)

    # Polyak targets and the EMA actor (a copy before actor_ema_start)
    for target_now, target_old, online in zip(algorithm.critic_target.parameters(), target_before.parameters(),
                                              algorithm.critic.parameters()):
        assert torch.allclose(target_now, 0.995 * target_old + 0.005 * online, atol=1e-7)
    assert all(torch.equal(e, p) for e, p in zip(algorithm.ema_head.parameters(), algorithm.head.parameters()))


@pytest.mark.parametrize("offline_lr_decay", [False, True])
def test_the_offline_phase_resumes_exactly_through_a_weights_only_checkpoint(offline_lr_decay):
    whole, offline = make(offline_lr_decay=offline_lr_decay)
    OfflineRLRunner(whole, offline, steps=6, batch_size=8, log_every=2).run()

    first, offline_first = make(offline_lr_decay=offline_lr_decay)
    runner = OfflineRLRunner(first, offline_first, steps=6, batch_size=8, log_every=3, callbacks=[KilledAfter(1)])
    with pytest.raises(Killed):  # the process dies after the first iteration's checkpoint (3 of 6 steps)
        runner.run()
    buffer = io.BytesIO()
    torch.save(runner.training_state(), buffer)
    buffer.seek(0)
    # other weights and generators, all overwritten by the load
    resumed, _ = make(seed=1, offline_lr_decay=offline_lr_decay)
    second = OfflineRLRunner(resumed, offline_store(0), steps=6, batch_size=8, log_every=3)  # the same data
    second.load({}, torch.load(buffer, weights_only=True))
    second.run()
    assert resumed.offline_steps == whole.offline_steps == 6
    assert_trees_equal(resumed.state_dict(), whole.state_dict())
    assert_trees_equal(resumed.head.state_dict(), whole.head.state_dict())


def test_the_offline_lr_decay_is_torchs_cosine_annealing_and_online_starts_back_at_lr():
    """With ``offline_lr_decay`` the actor and critics step at torch's ``CosineAnnealingLR(T_max=6,
    eta_min=0)`` rates, one per gradient step; afterwards both optimizers are back at ``lr``."""
    algorithm, offline = make(offline_lr_decay=True)
    seen, step = [], algorithm.gradient_step

    def recording_step(batch):
        seen.append((algorithm.actor_optimizer.param_groups[0]["lr"], algorithm.critic_optimizer.param_groups[0]["lr"]))
        return step(batch)

    algorithm.gradient_step = recording_step
    OfflineRLRunner(algorithm, offline, steps=6, batch_size=8, log_every=4).run()
    oracle = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=LR)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(oracle, T_max=6, eta_min=0.0)
    expected = []
    for _ in range(6):
        expected.append(oracle.param_groups[0]["lr"])
        oracle.step()
        schedule.step()
    assert [actor for actor, _ in seen] == pytest.approx(expected, rel=1e-9, abs=1e-15)
    assert [critic for _, critic in seen] == [actor for actor, _ in seen]
    assert expected[-1] < 0.1 * LR
    assert [group["lr"] for opt in (algorithm.actor_optimizer, algorithm.critic_optimizer)
            for group in opt.param_groups] == [LR, LR]


def test_acting_after_the_offline_phase_skips_the_random_warm_up():
    algorithm, offline = make()
    obs = torch.randn(4, OBS_DIM)
    torch.manual_seed(0)
    uniform = algorithm.act(obs)  # from scratch: uniform actions until learning_starts
    OfflineRLRunner(algorithm, offline, steps=1, batch_size=8).run()
    algorithm.cfg.explore_initial = algorithm.cfg.explore_final = 0.0
    torch.manual_seed(1)
    acted = algorithm.act(obs)
    torch.manual_seed(1)
    assert torch.equal(acted, algorithm.softmax_q.act(obs, deterministic=False))
    assert not torch.equal(uniform, acted)


def test_consistency_ac_offline_then_online_in_one_run(tmp_path, hopper_dataset):
    """60 offline steps on 600 random Hopper transitions (evaluated after 40 and 60), then 200 env steps
    online: one learner throughout (the online checkpoint counts the offline steps, and its critics
    took 60 + 150 steps). Measured 10 s."""
    from genpol.api import train
    from genpol.checkpoint import load_latest

    run_dir = tmp_path / "run"
    summary = train(env="hopper", policy="consistency", learner="consistency_ac", total_steps=200, run_dir=run_dir,
                    overrides=["pipeline=offline_to_online", f"dataset.path={hopper_dataset}",
                               "policy.hidden_sizes=[32,32,32]", "learner.critic_hidden_sizes=[32,32]",
                               "pipeline.pretrain_steps=60", "pipeline.pretrain_log_every=20",
                               "pipeline.pretrain_eval_every=2", "pipeline.pretrain_batch_size=32",
                               "pipeline.eval_episodes=2", "env.num_envs=1", "learner.learning_starts=50",
                               "learner.iteration_steps=100", "learner.batch_size=32", "learner.act_candidates=5",
                               "pipeline.video=false", "logger.progress_bar=false"])
    pretrained = summary["pretrained"]
    assert pretrained["learner"] == "offline consistency_ac" and pretrained["gradient_steps"] == 60
    assert [step for step, _ in pretrained["eval_history"]] == [40, 60]
    assert np.isfinite(pretrained["normalized_score"]) and np.isfinite(summary["eval_return_mean"])
    rows = [json.loads(line) for line in (run_dir / "pretrain" / "progress.jsonl").read_text().splitlines()]
    assert all(np.isfinite(row["pretrain/q_loss"]) and np.isfinite(row["pretrain/bc_loss"]) for row in rows)
    _, _, offline_state = load_latest(run_dir / "pretrain" / "checkpoints")
    _, _, online_state = load_latest(run_dir / "checkpoints")
    assert offline_state["algorithm"]["env_steps"] == 0 and offline_state["algorithm"]["critic_steps"] == 60
    assert online_state["algorithm"]["offline_steps"] == 60 and online_state["algorithm"]["critic_steps"] == 60 + 150


def test_raw_observations_reach_the_networks_in_both_phases(tmp_path, hopper_dataset, monkeypatch):
    """``dataset.observations=raw`` (Ding & Jin's and Diffusion-QL's inputs), through the pipeline: the
    Q-learner's offline transitions and the BC phase's chunks are the file's own observations, and the saved
    policy's env returns gymnasium's, where ``min_max`` (the default) maps each dimension's dataset range onto
    [-1, 1]. Each phase is caught where the pipeline hands its data over."""
    import genpol.pipelines.offline_to_online as pipeline
    from genpol import envs
    from genpol.api import compose_config, load_policy, train
    from genpol.configure import validate
    from genpol.data import load_dataset
    from genpol.errors import ConfigError

    dataset = load_dataset(str(hopper_dataset))
    replays, bc_observations = [], []
    make_transitions, make_bc_runner = pipeline.dataset_transitions, pipeline.BCRunner
    monkeypatch.setattr(pipeline, "dataset_transitions",
                        lambda *args, **kwargs: replays.append(make_transitions(*args, **kwargs)) or replays[-1])
    monkeypatch.setattr(pipeline, "BCRunner",
                        lambda head, obs, *args, **kwargs: bc_observations.append(obs) or make_bc_runner(
                            head, obs, *args, **kwargs))
    common = [f"dataset.path={hopper_dataset}", "pipeline=offline_to_online", "pipeline.pretrain_steps=4",
              "pipeline.pretrain_batch_size=16", "pipeline.eval_episodes=1", "env.num_envs=1", "pipeline.video=false",
              "logger.progress_bar=false"]
    q_learner = ["policy.hidden_sizes=[16,16]", "learner.critic_hidden_sizes=[16]", "learner.learning_starts=10",
                 "learner.batch_size=16", "learner.act_candidates=2"]
    for observations in ("raw", "min_max"):
        train(env="hopper", policy="consistency", learner="consistency_ac", total_steps=20,
              run_dir=tmp_path / f"q-{observations}", overrides=[*common, *q_learner,
                                                                 f"dataset.observations={observations}"])
    rows = len(dataset.rewards)  # then the next observations of truncated ends (dataset.truncated_rows=keep)
    raw, scaled = (replay.observations.numpy()[:rows] for replay in replays)
    np.testing.assert_array_equal(raw, dataset.observations.astype(np.float32))
    np.testing.assert_array_equal(replays[0].observations.numpy()[rows:], dataset.end_next_observations)
    assert scaled.min() >= -1 and scaled.max() <= 1 and np.abs(raw - scaled).max() > 1.0

    train(env="hopper", policy="gaussian", learner="ppo", total_steps=64, run_dir=tmp_path / "bc",
          overrides=[*common, "dataset.observations=raw", "learner.rollout_steps=64", "learner.minibatch_size=32"])
    chunks = bc_observations[-1].numpy()
    np.testing.assert_array_equal(chunks, dataset.observations[:len(chunks)].astype(np.float32))

    for run in ("q-raw", "bc"):
        policy = load_policy(tmp_path / run)
        assert policy.spec["obs_normalization"] == "none"
        env, reference = policy.make_env(num_envs=1, seed=3), envs.make("gym:Hopper-v5", num_envs=1, seed=3)
        torch.testing.assert_close(env.reset(), reference.reset(), rtol=0, atol=0)
        env.close()
        reference.close()
    assert load_policy(tmp_path / "q-min_max").spec["obs_normalization"] == "minmax"
    with pytest.raises(ConfigError, match="dataset.observations"):
        validate(compose_config(["env=hopper", "pipeline=offline_to_online", "dataset.observations=scaled"]))


def test_the_online_phase_takes_its_own_options_and_resumes_with_them(tmp_path, hopper_dataset):
    """Ding & Jin's switch between the phases through ``pipeline.online_learner``, ``online_policy`` and
    ``online_reset``: offline eta 0.1 with the CT loss, actor lr 3e-4 and T = 2; online eta 1, no BC, actor lr
    1e-5, critics 2e-4 and T = 5, the step counts from 0. The offline checkpoint's head samples in 2 steps, the online ones' in 5; online the
    actor loss is the Q-loss alone (no BC term logged), where offline it is BC + 0.1 Q; the online
    optimizers run at the online rates; and a copy rewound to its first online checkpoint resumes to the
    uninterrupted run's weights (the options, the EMA actor's T included, are applied on resume too)."""
    from genpol.api import train
    from genpol.checkpoint import list_checkpoints, load_policy_files

    from conftest import final_checkpoint, rewound_copy

    overrides = ["pipeline=offline_to_online", f"dataset.path={hopper_dataset}", "policy.hidden_sizes=[32,32,32]",
                 "policy.sampling_steps=2", "learner.critic_hidden_sizes=[32,32]", "learner.eta=0.1", "learner.bc_coef=1",
                 "learner.lr=3e-4", "pipeline.pretrain_steps=40", "pipeline.pretrain_log_every=20",
                 "pipeline.pretrain_batch_size=32", "pipeline.eval_episodes=1", "env.num_envs=1",
                 "learner.learning_starts=50", "learner.iteration_steps=100", "learner.batch_size=32",
                 "learner.act_candidates=3", "pipeline.checkpoint_every=1", "pipeline.video=false",
                 "logger.progress_bar=false", "+pipeline.online_learner.eta=1.0", "+pipeline.online_learner.bc_coef=0",
                 "+pipeline.online_learner.lr=1e-5", "+pipeline.online_learner.critic_lr=2e-4",
                 "+pipeline.online_policy.sampling_steps=5", "pipeline.online_reset=[optimizers,targets,step_counts]"]
    whole = tmp_path / "whole"
    train(env="hopper", policy="consistency", learner="consistency_ac", total_steps=200, run_dir=whole,
          overrides=overrides)

    offline_spec, _ = load_policy_files(list_checkpoints(whole / "pretrain" / "checkpoints")[-1])
    name, online_spec, weights, state = final_checkpoint(whole)
    def sampling_steps(spec):  # the softmax-Q policy's actor: the consistency head
        return spec["head"]["kwargs"]["actor"]["kwargs"]["sampling_steps"]

    assert sampling_steps(offline_spec) == 2 and sampling_steps(online_spec) == 5
    offline_rows = [json.loads(line) for line in (whole / "pretrain" / "progress.jsonl").read_text().splitlines()]
    online_rows = [json.loads(line) for line in (whole / "progress.jsonl").read_text().splitlines()]
    assert all("pretrain/bc_loss" in row for row in offline_rows)
    trained = [row for row in online_rows if "losses/q_loss" in row]
    assert trained and all("losses/bc_loss" not in row and row["losses/policy"] == row["losses/q_loss"]
                           for row in trained)
    algorithm = state["algorithm"]
    # the step counts started again at the online phase: 40 offline steps, then one per env step from 51 on
    assert algorithm["offline_steps"] == 40 and algorithm["critic_steps"] == algorithm["actor_steps"] == 150
    assert [group["lr"] for group in algorithm["actor_optimizer"]["param_groups"]] == [1e-5]
    assert [group["lr"] for group in algorithm["critic_optimizer"]["param_groups"]] == [2e-4]

    rewound_copy(whole, tmp_path / "resumed", [name])
    train(env="hopper", policy="consistency", learner="consistency_ac", total_steps=200,
          run_dir=tmp_path / "resumed", overrides=overrides)
    resumed = final_checkpoint(tmp_path / "resumed")
    assert resumed[0] == name and resumed[1] == online_spec
    assert_trees_equal(resumed[2], weights, "policy")
    assert_trees_equal(resumed[3]["algorithm"], state["algorithm"], "algorithm")


def test_change_options_reaches_the_head_the_ema_actor_and_the_optimizers():
    """``QGradientActor.change_options``: the new eta and bc_coef are what the next actor loss uses, the
    rates are on the optimizers (the moments kept), and the online head and the EMA actor (whose samples
    make the TD targets) both sample in the new number of steps, with the same schedule as a head built
    so; a field the learner or the head cannot change is refused by name."""
    algorithm, offline = make()
    OfflineRLRunner(algorithm, offline, steps=3, batch_size=8, log_every=1).run()
    moments = copy.deepcopy(algorithm.actor_optimizer.state_dict()["state"])
    algorithm.change_options({"eta": 1.0, "bc_coef": 0.0, "lr": 1e-5, "critic_lr": 2e-4}, {"sampling_steps": 5})
    assert (algorithm.cfg.eta, algorithm.cfg.bc_coef) == (1.0, 0.0)
    assert [g["lr"] for g in algorithm.actor_optimizer.param_groups] == [1e-5]
    assert [g["lr"] for g in algorithm.critic_optimizer.param_groups] == [2e-4]
    assert_trees_equal(algorithm.actor_optimizer.state_dict()["state"], moments, "actor moments")
    built = ConsistencyHead(OBS_DIM, ACT_DIM, hidden_sizes=(16, 16), sampling_steps=5)
    for head in (algorithm.head, algorithm.ema_head):
        assert head.sampling_steps == 5 and head.spec()["kwargs"]["sampling_steps"] == 5
        for name in ("sampling_taus", "step_stds", "logprob_dims"):
            assert torch.equal(getattr(head, name), getattr(built, name)), name
    batch = offline.sample(8)
    loss, named = algorithm.actor_loss(batch)
    assert "bc_loss" not in named and torch.equal(named["actor"], named["q_loss"])
    with pytest.raises(ValueError, match=r"cannot change \['batch_size'\]"):
        algorithm.change_options({"batch_size": 4}, {})
    with pytest.raises(ValueError, match=r"cannot change \['hidden_sizes'\]"):
        algorithm.change_options({}, {"hidden_sizes": [4]})


def test_reset_for_online_starts_the_parts_afresh_from_its_seed():
    """``reset_for_online`` (``pipeline.online_reset``, Ding & Jin's reload into a new agent): Adam's state
    empty (its next step is a first step), the target critics and the EMA actor with the weights a new
    Q-ensemble and a new head drawn from the seed have, the step counts at 0; the trained critics and
    head kept, and torch's global generator untouched."""
    from genpol.qensemble import QEnsemble

    algorithm, offline = make()
    OfflineRLRunner(algorithm, offline, steps=3, batch_size=8, log_every=1).run()
    trained = copy.deepcopy({"critic": algorithm.critic.state_dict(), "head": algorithm.head.state_dict()})
    global_rng = torch.random.get_rng_state()
    algorithm.reset_for_online(["optimizers", "targets", "step_counts"], seed=11)
    assert torch.equal(torch.random.get_rng_state(), global_rng)
    assert not algorithm.actor_optimizer.state and not algorithm.critic_optimizer.state
    assert algorithm.critic_steps == algorithm.actor_steps == 0 and algorithm.offline_steps == 3
    torch.manual_seed(11)  # the draws of a new learner's target critic, then of a new head
    critic = QEnsemble(OBS_DIM, ACT_DIM, num_qs=2, hidden_sizes=(16,), activation=algorithm.cfg.critic_activation,
                       layer_norm=algorithm.cfg.critic_layer_norm, init=algorithm.cfg.critic_init)
    head = ConsistencyHead(OBS_DIM, ACT_DIM, hidden_sizes=(16, 16))
    assert_trees_equal(algorithm.critic_target.state_dict(), critic.state_dict(), "target critics")
    assert_trees_equal(algorithm.ema_head.state_dict(), head.state_dict(), "EMA actor")
    assert_trees_equal({"critic": algorithm.critic.state_dict(), "head": algorithm.head.state_dict()}, trained, "trained")
    algorithm.gradient_step(offline.sample(8))
    assert {int(state["step"]) for state in algorithm.actor_optimizer.state.values()} == {1}
    with pytest.raises(ValueError, match=r"unknown online reset \['critics'\]"):
        algorithm.reset_for_online(["critics"], seed=0)


def test_a_resume_without_the_replay_refills_it_and_keeps_the_runs_clocks():
    """``learner.save_replay=false``: the resumed learner refills ``learning_starts`` transitions before it
    learns again, acting with its policy meanwhile (it acted uniformly at random), but its exploration schedule
    goes on from the run's step (it restarted at epsilon 1.0 after hours of training) and the offline store
    draws the rows it would have drawn next (it began its stream again)."""
    from genpol.algorithms.qgradient import QGradientActor
    from genpol.config.offpolicy import QGradientConfig
    from genpol.data import OfflineDataset
    from genpol.heads import build_head
    from genpol.storage.replay import offline_transitions

    rows = 500
    offline_data = OfflineDataset(np.arange(2 * rows, dtype=np.float32).reshape(rows, 2),
                                  np.zeros((rows, 2), np.float32),
                                  np.arange(rows, dtype=np.float32), np.zeros(rows, bool), np.zeros(rows, bool))

    def make():
        torch.manual_seed(0)
        cfg = QGradientConfig(learning_starts=10, batch_size=8, critic_hidden_sizes=[8], bc_coef=0.0, act_candidates=2,
                              explore_initial=1.0, explore_final=0.01, explore_fraction=0.1, save_replay=False,
                              offline_ratio=0.5)
        return QGradientActor(build_head("tanh_gaussian", 2, 2, hidden_sizes=[8]), cfg, total_steps=1000, num_envs=1,
                              obs_dim=2, act_dim=2, capacity=2000, device=torch.device("cpu"), seed=0,
                              offline=offline_transitions(offline_data, seed=4))

    def store(learner, steps):
        for _ in range(steps):
            learner.process_env_step(torch.randn(1, 2), torch.rand(1, 2) * 2 - 1, torch.randn(1), torch.zeros(1),
                                     {"final_obs": torch.randn(1, 2)})

    uninterrupted, resumed = make(), make()
    store(uninterrupted, 150)
    uninterrupted.sampler.offline.sample(4)
    resumed.load_state_dict(uninterrupted.state_dict())
    assert resumed.epsilon() == uninterrupted.epsilon() == pytest.approx(0.01)
    assert not resumed.warming_up() and not resumed.ready() and uninterrupted.ready()  # the policy acts
    store(resumed, 11)
    assert resumed.ready()
    assert torch.equal(resumed.sampler.offline.sample(4).rewards, uninterrupted.sampler.offline.sample(4).rewards)

"""SAC and RLPD through the whole stack: capability checks, the CLI and API end to end (checkpoints,
video, evaluation), RLPD with an offline dataset made in the real simulator, offline-to-online with
an off-policy learner, and a learning test on Pendulum."""

import json
import re
import shutil

import h5py
import numpy as np
import pytest
import torch

from genpol.api import compose_config, evaluate, load_policy, train
from genpol.config import ConfigError
from genpol.configure import validate
from genpol.data import DatasetError

from conftest import assert_nonblank_mp4, run_cli

TINY_SAC = ["learner.learning_starts=64", "learner.iteration_steps=128", "learner.batch_size=32",
            "policy.hidden_sizes=[32,32]", "learner.critic_hidden_sizes=[32,32]", "pipeline.eval_episodes=2",
            "logger.progress_bar=false", "env.num_envs=2"]


@pytest.mark.parametrize("policy,missing", [("fpo", "reparameterized sampling, log-prob of its own samples"),
                                            ("policyflow", "reparameterized sampling"),
                                            ("gaussian", "log-prob of its own samples")])
def test_an_impossible_head_and_learner_fails_at_validation_naming_both(policy, missing):
    with pytest.raises(ConfigError) as error:
        validate(compose_config([f"policy={policy}", "learner=sac", "run_dir=/tmp/unused"]))
    message = str(error.value)
    assert f"policy={policy}" in message and "learner=sac" in message and missing in message


def test_the_cli_refuses_an_impossible_combination_with_exit_code_2():
    result = run_cli("-m", "genpol.train", "policy=fpo", "learner=sac", "run_dir=/tmp/unused", check=False)
    assert result.returncode == 2 and "lacks reparameterized sampling" in result.stderr


@pytest.fixture(scope="module")
def sac_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("sac")
    summary = train("hopper", "tanh_gaussian", "sac", total_steps=512, run_dir=root / "run",
                    overrides=[*TINY_SAC, f"pipeline.video_dir={root / 'videos'}"])
    return root, summary


def test_sac_run_leaves_summary_checkpoint_tensorboard_and_video(sac_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root, summary = sac_run
    run_dir = root / "run"
    assert summary["env_steps"] == 512 and summary["learner"] == "sac" and summary["missing"] == {}
    assert summary["checkpoint"].endswith("step_000000000512")
    assert_nonblank_mp4(summary["video"])
    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for name in ("charts/SPS", "losses/value", "losses/policy", "losses/alpha", "losses/q_mean", "losses/entropy",
                 "charts/replay_size"):
        assert name in tags, name
    rows = [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]
    # learning starts after 64 env steps: 2 envs x 1 gradient step per vector step from then on
    assert rows[-1]["losses/gradient_steps"] == 512 - 64
    assert np.isfinite(rows[-1]["losses/value"]) and 0 < rows[-1]["losses/alpha"] < 1.0


def test_sac_checkpoint_evaluates_and_predicts(sac_run):
    root, summary = sac_run
    policy = load_policy(root / "run")
    action = policy.predict(np.zeros(11))
    assert action.shape == (3,) and np.all(np.abs(action) <= 1.0)
    # what a user may pass by mistake: named, not a torch message or a silent NaN action
    with pytest.raises(TypeError, match=r"got gymnasium's \(observation, info\) pair"):
        policy.predict((np.zeros(11), {}))
    with pytest.raises(TypeError, match=r"got a dict observation \(keys \['observation'\]\), but gym:Hopper-v5's "
                                        r"observations were flat arrays in training"):
        policy.predict({"observation": np.zeros(11)})
    with pytest.raises(ValueError, match=r"observations hold NaN or inf \(first at flat index 4\)"):
        policy.predict(np.where(np.arange(11) == 4, np.nan, 0.0))
    results = evaluate(root / "run", episodes=2, video=False)
    assert np.isfinite(results["deterministic_return_mean"])
    # the run's own final evaluation is reproduced from its checkpoint (same seeds, deterministic)
    assert results["deterministic_return_mean"] == pytest.approx(summary["eval_return_mean"], rel=1e-6)



def test_rlpd_mixes_the_offline_dataset_into_every_batch(tmp_path, hopper_dataset):
    """The bundle through the API, eager (its compiled step runs in the smoke test and the parity
    harness; compiling here cost most of this test's time). A resume after the file was made again with other
    data stopped in the offline replay's load_state_dict with a bare ValueError (exit 1): a DatasetError
    naming dataset.path, before anything is built, as the offline-to-online pipeline does."""
    data = tmp_path / "hopper.hdf5"
    shutil.copyfile(hopper_dataset, data)
    overrides = ["+experiment=rlpd", f"dataset.path={data}", "learner.compile=false",
                 "learner.learning_starts=128", "learner.num_qs=4", "learner.utd=3", "learner.iteration_steps=128",
                 "learner.batch_size=16", "policy.hidden_sizes=[32,32]", "learner.critic_hidden_sizes=[32,32]",
                 "pipeline.video=false", "pipeline.eval_episodes=1", "logger.progress_bar=false"]
    summary = train(env="hopper", policy="tanh_gaussian", learner="sac", total_steps=256, run_dir=tmp_path / "run",
                    overrides=overrides)
    assert summary["offline_ratio"] == 0.5 and summary["dataset_transitions"] >= 600
    assert np.isfinite(summary["eval_normalized_score"])  # D4RL references of the hopper task
    from genpol.checkpoint import load_training_state, resolve_checkpoint

    state = load_training_state(resolve_checkpoint(tmp_path / "run"))["algorithm"]
    # 128 learning env steps, each one round of 3 critic minibatches and one actor step
    assert state["critic_steps"] == 128 * 3 and state["actor_steps"] == 128
    assert state["replay"]["offline"]["fingerprint"]["transitions"] > 500
    assert state["critic"]["weights.0"].shape[0] == 4  # the ensemble's heads
    with h5py.File(data, "r+") as file:  # the same path, other data
        file["rewards"][0] += 1.0
    with pytest.raises(DatasetError, match=rf"^dataset.path: {re.escape(str(data))} is not the data "):
        train(env="hopper", policy="tanh_gaussian", learner="sac", total_steps=384, run_dir=tmp_path / "run",
              overrides=overrides)


def test_offline_to_online_with_sac_pretrains_then_mixes_the_data(tmp_path, hopper_dataset):
    summary = train("hopper", "tanh_gaussian", "sac", total_steps=256, run_dir=tmp_path / "run",
                    overrides=[*TINY_SAC, "pipeline=offline_to_online", f"dataset.path={hopper_dataset}",
                               "pipeline.pretrain_steps=50", "pipeline.pretrain_log_every=25",
                               "learner.offline_ratio=0.5", "pipeline.video=false"])
    assert summary["pretrained"]["gradient_steps"] == 50 and np.isfinite(summary["eval_return_mean"])
    assert (tmp_path / "run" / "pretrain" / "checkpoints").is_dir()


@pytest.mark.parametrize("learner, too_big", [("sac", "learner.buffer_size=100000000000"),
                                               ("ppo", "learner.rollout_steps=1000000000")])
def test_offline_to_online_checks_the_online_learners_memory_before_pretraining(tmp_path, hopper_dataset,
                                                                              learner, too_big):
    """The online learner is built after behaviour cloning: its memory check came after the pretraining, and the
    key it named could not change any more (a rerun resumes, the config fixed), so the pretraining was lost."""
    with pytest.raises(ConfigError, match=rf"^{too_big} needs .* lower {too_big.split('=')[0]}"):
        train("hopper", "tanh_gaussian" if learner == "sac" else "gaussian", learner, total_steps=256,
              run_dir=tmp_path / "run", overrides=[*(TINY_SAC if learner == "sac" else []), too_big,
                                                   "pipeline=offline_to_online", f"dataset.path={hopper_dataset}",
                                                   "pipeline.pretrain_steps=50", "pipeline.video=false"])
    assert not (tmp_path / "run" / "pretrain").exists()


def test_offline_to_online_maps_off_policy_actions_onto_the_envs_box(tmp_path, hopper_dataset):
    """A dataset whose actions span [-0.3, 0.3] of Hopper's [-1, 1]: an off-policy learner's agent acts in the
    env's box (``dataset.actions`` resolves to ``env``: RLPD's, EXPO's and Ding & Jin's code), so its warm-up and
    its fine-tuned policy can leave the data's range, and the saved policy records no narrower bounds;
    ``dataset.actions=min_max`` (DPPO's, the on-policy default) maps the agent's [-1, 1] onto the data's range."""
    import yaml

    from genpol.data import load_d4rl, write_d4rl

    data = load_d4rl(hopper_dataset)
    narrow = write_d4rl(tmp_path / "hopper_narrow-v5.hdf5", data.observations, 0.3 * data.actions, data.rewards,
                        data.terminals, data.timeouts)
    for actions in ("auto", "min_max"):
        run = tmp_path / actions
        train("hopper", "tanh_gaussian", "sac", total_steps=128, run_dir=run,
              overrides=[*TINY_SAC, "pipeline=offline_to_online", f"dataset.path={narrow}", f"dataset.actions={actions}",
                         "pipeline.pretrain_steps=10", "pipeline.pretrain_log_every=10", "pipeline.video=false"])
        saved = yaml.safe_load((run / "config.yaml").read_text())["dataset"]["actions"]
        bounds = load_policy(run).spec["agent_action_bounds"]
        if actions == "auto":
            assert saved == "env" and bounds is None
        else:
            assert saved == "min_max" and np.allclose(bounds, [0.3 * data.actions.min(0), 0.3 * data.actions.max(0)])


def test_a_resume_without_the_replay_refills_it_acting_with_the_policy():
    """save_replay=false: the resumed SAC refills learning_starts transitions before it learns again; it acted
    uniformly at random meanwhile (10k steps with the SAC bundle, after every such resume), where SB3 acts with
    the loaded policy. Here a policy that always acts ~ tanh(1) = 0.76."""
    from genpol.algorithms.sac import SAC
    from genpol.config.offpolicy import SACConfig
    from genpol.heads import TanhGaussianHead

    def make():
        torch.manual_seed(0)
        head = TanhGaussianHead(3, 1, hidden_sizes=[8])
        with torch.no_grad():
            head.mu.weight.zero_(), head.mu.bias.fill_(1.0), head.log_std.weight.zero_(), head.log_std.bias.fill_(-10)
        return SAC(head, SACConfig(batch_size=4, learning_starts=50, save_replay=False, critic_hidden_sizes=[8]),
                   num_envs=1, obs_dim=3, act_dim=1, capacity=1000, device=torch.device("cpu"))

    def step(learner):
        obs = torch.randn(1, 3)
        action = learner.act(obs)
        learner.process_env_step(obs, action, torch.zeros(1), torch.zeros(1, dtype=torch.bool), {"final_obs": obs})
        return float(action)

    trained, resumed = make(), make()
    assert min(abs(step(trained) - np.tanh(1.0)) for _ in range(50)) > 1e-3  # uniform while the run warms up
    for _ in range(150):
        step(trained)
    resumed.load_state_dict(trained.state_dict())
    actions = [step(resumed) for _ in range(50)]
    assert not resumed.ready()  # refilling: learning waits for more than learning_starts new transitions
    actions.append(step(resumed))
    assert resumed.ready() and np.allclose(actions, np.tanh(1.0), atol=1e-3)


def test_the_replays_finiteness_check_sees_every_new_row_after_a_wrap():
    """recent_data() read from the last write position: a resumed full buffer (its check starting at row 0) or
    an iteration longer than the buffer skipped rows, and a NaN reward there was blamed on the networks later.
    Capacity 100, resumed at position 30, 100 new rows: all 100 are checked, the bad one among them."""
    from genpol.algorithms.sac import SAC
    from genpol.config.offpolicy import SACConfig
    from genpol.heads import TanhGaussianHead

    def make():
        return SAC(TanhGaussianHead(3, 2, hidden_sizes=[8]), SACConfig(batch_size=8, learning_starts=0,
                                                                       critic_hidden_sizes=[8]),
                   num_envs=1, obs_dim=3, act_dim=2, capacity=100, device=torch.device("cpu"))

    def fill(learner, rows):
        for _ in range(rows):
            obs = torch.randn(1, 3)
            learner.process_env_step(obs, torch.rand(1, 2) * 2 - 1, torch.randn(1), torch.zeros(1, dtype=torch.bool),
                                     {"final_obs": obs})

    before = make()
    fill(before, 130)
    assert len(before.recent_data()["rewards"]) == 100  # 130 written to a ring of 100: every row, once
    resumed = make()
    resumed.load_state_dict(before.state_dict())
    assert resumed.replay.position == 30 and len(resumed.recent_data()["rewards"]) == 0  # checked before the save
    fill(resumed, 100)
    resumed.replay.rewards[50] = float("nan")
    rewards = resumed.recent_data()["rewards"]
    assert len(rewards) == 100 and torch.isnan(rewards).sum() == 1
    fill(resumed, 7)
    assert torch.equal(resumed.recent_data()["observations"], resumed.replay.obs[30:37])


def test_a_stochastic_evaluation_leaves_the_training_stream_alone():
    """``pipeline.eval_deterministic=false`` (EXPO's and Consistency-AC's bundles) samples actions while it
    evaluates: from its own seeded generator, so the trained weights do not depend on when or how often the
    run evaluates (they did: the evaluation drew from the generator training draws from), and two
    evaluations of one policy draw alike."""
    from genpol import envs
    from genpol.algorithms.sac import SAC
    from genpol.callbacks.evaluation import Evaluation
    from genpol.config.offpolicy import SACConfig
    from genpol.heads import build_head
    from genpol.runners.offpolicy import OffPolicyRunner

    def multigoal(num_envs, *_):
        return envs.make("genpol:MultiGoal", num_envs=num_envs, max_episode_steps=7)

    def trained(evaluate):
        torch.manual_seed(0)
        cfg = SACConfig(learning_starts=10, batch_size=16, buffer_size=1000, critic_hidden_sizes=[16, 16])
        head = build_head("tanh_gaussian", 2, 2, hidden_sizes=[16, 16])
        algorithm = SAC(head, cfg, num_envs=2, obs_dim=2, act_dim=2, capacity=1000, device=torch.device("cpu"),
                        seed=0)
        runner = OffPolicyRunner(multigoal(2), algorithm, total_steps=10**6, seed=0, iteration_steps=20)
        runner.obs = runner.env.reset(seed=0)
        runner.iterate()
        if evaluate:
            evaluation = Evaluation(multigoal, episodes=2, deterministic=False)
            first, again = (evaluation.evaluate(runner)[0].returns for _ in range(2))
            np.testing.assert_array_equal(first, again)
        runner.iterate()
        return head.state_dict()

    plain, evaluated = trained(False), trained(True)
    assert all(torch.equal(plain[key], evaluated[key]) for key in plain)


def test_sac_without_an_entropy_term_trains(tmp_path):
    """``learner.ent_coef=0`` (validation accepts >= 0): alpha is exactly 0 (log_alpha -inf, fixed), which the
    non-finite guard stopped after the first iteration; a fixed temperature is not a guarded parameter."""
    summary = train(env="pendulum", policy="tanh_gaussian", learner="sac", total_steps=300, run_dir=tmp_path / "run",
                    overrides=["learner.ent_coef=0", "learner.learning_starts=100", "learner.batch_size=32",
                               "learner.critic_hidden_sizes=[16,16]", "policy.hidden_sizes=[16,16]", "env.num_envs=1",
                               "pipeline.eval_episodes=1", "pipeline.video=false", "logger.progress_bar=false"])
    assert summary["env_steps"] == 300 and np.isfinite(summary["eval_return_mean"])
    rows = [json.loads(line) for line in (tmp_path / "run" / "progress.jsonl").read_text().splitlines()]
    assert any(row.get("losses/gradient_steps", 0) > 0 for row in rows)
    assert all(row["losses/alpha"] == 0.0 for row in rows if "losses/alpha" in row)


def test_sac_learns_pendulum(tmp_path):
    """A random policy scores about -1200 on Pendulum-v1 (deterministic evaluation, 5 episodes);
    SAC with SB3's defaults (smaller networks, to fit CI) swings it up within 3000 env steps."""
    torch.manual_seed(0)
    summary = train("pendulum", "tanh_gaussian", "sac", total_steps=3000, run_dir=tmp_path / "run",
                    overrides=["learner.learning_starts=500", "learner.iteration_steps=500",
                               "policy.hidden_sizes=[64,64]", "learner.critic_hidden_sizes=[64,64]",
                               "learner.lr=1e-3", "pipeline.video=false", "logger.progress_bar=false",
                               "env.num_envs=1"])
    assert summary["eval_return_mean"] > -500, summary["eval_return_mean"]

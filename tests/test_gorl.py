"""GoRL: the latent-decoder head's math, the decoder's flow matching, and the stage pipeline (stage
transitions, budget accounting, the combined policy, resume after SIGKILL) on the real MultiGoal env."""

import json
import os
import signal
import time

import pytest
import torch

from genpol.checkpoint import list_checkpoints, load_policy_files, load_training_state
from genpol.config import ConfigError
from genpol.heads.latent import LatentDecoderHead
from genpol.pipelines.gorl.stages import stage_budgets
from genpol.pipelines.gorl.distill import DecoderTraining

from conftest import REPO, assert_trees_equal
from warm_start import WarmProcess

OBS_DIM, ACT_DIM = 5, 3


def test_stage_zero_decoder_is_exactly_the_identity():
    torch.manual_seed(0)
    head = LatentDecoderHead(OBS_DIM, ACT_DIM, hidden_sizes=(16,), decoder_hidden_sizes=(16, 16))
    obs, z = torch.randn(64, OBS_DIM), 3 * torch.randn(64, ACT_DIM)
    assert torch.equal(head.decode(obs, z), z)
    with torch.no_grad():
        action, record = head.sample(obs)
    assert torch.equal(action, torch.tanh(record["z"]))  # tanh outside the decoder, nothing else
    assert torch.equal(head.act(obs), torch.tanh(head.distribution(obs)[0]))
    assert not any(p.requires_grad for p in head.decoder.parameters())  # frozen during the updates


def test_ratio_kl_entropy_and_latent_penalty_match_torch_distributions():
    torch.manual_seed(0)
    head = LatentDecoderHead(OBS_DIM, ACT_DIM, hidden_sizes=(16,), decoder_hidden_sizes=(16,), latent_l2_coef=0.01)
    head.decoder.load_state_dict(head.new_decoder().state_dict())  # a non-identity decoder changes nothing here
    obs = torch.randn(32, OBS_DIM)
    with torch.no_grad():
        _, record = head.sample(obs)
        raw = head.encoder(obs)
        old = torch.distributions.Normal(raw[:, :ACT_DIM], torch.nn.functional.softplus(raw[:, ACT_DIM:]) + 1e-3)
        for parameter in head.encoder.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
        raw = head.encoder(obs)
        mean, scale = raw[:, :ACT_DIM], torch.nn.functional.softplus(raw[:, ACT_DIM:]) + 1e-3
        new = torch.distributions.Normal(mean, scale)
    terms = head.log_ratio(obs, record)
    expected = (new.log_prob(record["z"]) - old.log_prob(record["z"])).sum(-1, keepdim=True)
    assert torch.allclose(terms.log_ratio, expected, atol=1e-5)
    assert torch.allclose(record["log_prob"], old.log_prob(record["z"]).sum(-1), atol=1e-5)
    assert torch.allclose(head.kl(obs, record), torch.distributions.kl_divergence(old, new).sum(-1), atol=1e-5)
    assert torch.allclose(terms.entropy, new.entropy().sum(-1), atol=1e-5)
    penalty = 0.01 * (mean.square().mean() + scale.square().mean())  # GoRL's c_z (mean(mu^2) + mean(sigma^2))
    assert torch.allclose(terms.aux_loss, penalty, atol=1e-7)


def test_the_decoder_learns_a_bimodal_target_from_the_gaussian_prior():
    """Pre-tanh actions at -1.5 or +1.5 (equal odds) in every state: the flow from N(0, I) must put
    mass on both modes and little between them, which no Gaussian can."""
    torch.manual_seed(0)
    head = LatentDecoderHead(2, 1, hidden_sizes=(8,), decoder_hidden_sizes=(64, 64))
    generator = torch.Generator().manual_seed(1)
    obs = torch.randn(2048, 2, generator=generator)
    sign = torch.randint(0, 2, (2048, 1), generator=generator).float() * 2 - 1
    actions = 1.5 * sign + 0.1 * torch.randn(2048, 1, generator=generator)
    weights, report = DecoderTraining(epochs=40, batch_size=128, lr=3e-3, patience=40).fit(head, obs, actions, seed=0)
    assert report["best_val_loss"] < report["history"][0]["val_loss"]
    head.decoder.load_state_dict(weights)
    with torch.no_grad():
        out = head.decode(torch.randn(2000, 2), torch.randn(2000, 1)).squeeze(-1)
    near_plus, near_minus = ((out - 1.5).abs() < 0.5).float().mean(), ((out + 1.5).abs() < 0.5).float().mean()
    assert near_plus > 0.3 and near_minus > 0.3, (near_plus, near_minus)
    assert (out.abs() < 0.5).float().mean() < 0.1


def test_stage_budgets_sum_to_total_steps_and_refuse_an_empty_stage():
    assert stage_budgets(180_000_000, [2, 2, 1, 1]) == [60_000_000, 60_000_000, 30_000_000, 30_000_000]
    assert sum(stage_budgets(1001, [1, 1, 1])) == 1001
    with pytest.raises(ConfigError, match="leaves a stage with no env steps"):
        stage_budgets(2, [1, 1, 1])


def test_stages_that_are_not_whole_rollouts_are_warned_with_the_steps_they_train(tmp_path, monkeypatch, caplog):
    """total_steps=2000 split [1, 3] is 500 and 1500 env steps; rollouts of 16 envs x 32 steps make each stage
    finish at 512 and 1536 (the encoder phase ends after a whole rollout), 2048 in all: it was silent."""
    from genpol.api import compose_config
    from genpol.build import make_env
    from genpol.configure import validate
    from genpol.pipelines.gorl.stages import warn_rollout_rounding

    monkeypatch.chdir(tmp_path)
    cfg = validate(compose_config([*(a for a in ARGS if not a.startswith("total_steps")), "total_steps=2000",
                                   f"run_dir={tmp_path / 'run'}"]))
    env = make_env(cfg.env, gamma=cfg.learner.gamma, seed=0)
    try:
        with caplog.at_level("WARNING", logger="genpol.pipelines.gorl.stages"):
            warn_rollout_rounding(cfg, env, stage_budgets(2000, [1, 3]))
            assert "the stages train [512, 1536], 2048 encoder env steps in all" in caplog.text
            caplog.clear()
            warn_rollout_rounding(cfg, env, stage_budgets(2048, [1, 3]))  # 512 and 1536: whole rollouts
            assert caplog.text == ""
    finally:
        env.close()


def test_stage_seeds_fit_every_backends_reset_and_keep_their_values_for_small_seeds():
    """seed=12345 made a collection seed of 12345 x 1000003, which dm_control (below 2^32) and EnvPool (int32)
    refuse: the run failed after stage 0 had trained, and at every resume. Seeds below 2147 keep their values."""
    from genpol import envs
    from genpol.pipelines.gorl.stages import COLLECT, DECODER, INIT, stage_seed

    assert stage_seed(3, 2, COLLECT) == 3 * 1_000_003 + 2 * 1_009 + 1  # what the runs so far used
    seeds = {stage_seed(12345, stage, purpose) for stage in range(4) for purpose in (INIT, COLLECT, DECODER)}
    assert len(seeds) == 12 and max(seeds) + 1024 < 2**31
    with envs.make("dmc:cartpole-balance", num_envs=2) as env:
        env.reset(seed=stage_seed(12345, 0, COLLECT))


def test_pipeline_gorl_refuses_another_head():
    from genpol.api import compose_config
    from genpol.configure import validate

    with pytest.raises(ConfigError, match="policy must be gorl for pipeline=gorl"):
        validate(compose_config(["env=multigoal", "policy=gaussian", "pipeline=gorl"]))


def test_a_collection_that_cannot_fit_is_refused_before_stage_zero_trains(tmp_path, monkeypatch):
    """MultiGoal's 2 + 2 floats a pair, 16 bytes: 10^6 collected pairs (and the 16 envs' extra row), held
    once (collected in place), beside the decoder's subset of 10^5 and its split, need 19.2 MB; refused at
    15 MB before stage 0 writes a checkpoint."""
    from genpol import memory
    from genpol.api import train

    monkeypatch.setattr(memory, "available_bytes", lambda device: 15_000_000)
    with pytest.raises(ConfigError, match=r"^pipeline.collect_steps=1000000 needs 19.2 MB for GoRL's collected "
                                          r"\(state, action\) pairs through a distillation, but cpu has 15.0 MB"):
        train(overrides=[*ARGS, "pipeline.collect_steps=1000000", "pipeline.decoder_max_samples=100000"],
              run_dir=tmp_path / "a")
    assert not (tmp_path / "a" / "stage_0" / "checkpoints").exists()


# --------------------------------------------------------------------------- the pipeline, end to end
# MultiGoal, 16 envs x 32 steps per iteration; stages of 512 and 1536 encoder steps (1 and 3 iterations)
ARGS = ["env=multigoal", "env.normalize_obs=true", "policy=gorl", "pipeline=gorl", "total_steps=2048",
        "pipeline.stage_weights=[1,3]", "learner.rollout_steps=32", "learner.minibatch_size=128", "learner.epochs=2",
        "policy.hidden_sizes=[16,16]", "policy.decoder_hidden_sizes=[32,32]", "policy.critic_hidden_sizes=[32,32]",
        "pipeline.collect_steps=1024", "pipeline.decoder_epochs=4", "pipeline.decoder_batch_size=128",
        "pipeline.eval_every=1", "pipeline.eval_episodes=4", "pipeline.checkpoint_every=1", "pipeline.video=false",
        "logger.progress_bar=false"]


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.train import run_training

    run_dir = tmp_path_factory.mktemp("gorl") / "reference"
    summary = run_training(validate(compose_config([*ARGS, f"run_dir={run_dir}"])), run_dir)
    return run_dir, summary


def test_stage_transitions_and_budget_accounting(reference_run):
    run_dir, summary = reference_run
    stage0, stage1 = (json.loads((run_dir / f"stage_{k}" / "stage.json").read_text()) for k in (0, 1))
    assert (stage0["clip_range"], stage0["max_grad_norm"], stage0["latent_l2_coef"]) == (0.15, 0.5, 5e-4)
    assert (stage1["clip_range"], stage1["max_grad_norm"], stage1["latent_l2_coef"]) == (0.3, 1.0, 1e-3)
    assert (stage0["encoder_env_steps"], stage1["encoder_env_steps"]) == (512, 1536)
    # budgets under their own names: collection after stage 0 only, at least collect_steps
    collection = torch.load(run_dir / "stage_0" / "collection.pt", weights_only=True)
    assert collection["env_steps"] >= 1024 and collection["actions"].shape == (collection["env_steps"], 2)
    for pairs in (collection["obs"], collection["actions"]):  # written in place: no spare rows saved
        assert pairs.untyped_storage().nbytes() == pairs.numel() * pairs.element_size()
    assert not (run_dir / "stage_1" / "collection.pt").exists()
    assert summary["encoder_env_steps"] == 2048 and summary["collection_env_steps"] == collection["env_steps"]
    assert summary["total_env_steps"] == 2048 + collection["env_steps"]
    # the summary's throughput, a key every pipeline's summary has (bench/multigoal.py read it and failed on GoRL's)
    assert summary["sps"] == pytest.approx(summary["total_env_steps"] / summary["wall_time_s"])
    # stage 0's decoder is the zero identity; stage 1 runs the new decoder and a fresh encoder
    best0 = load_policy_files(list_checkpoints(run_dir / "stage_0" / "best")[-1])[1]["head"]
    first1 = load_training_state(list_checkpoints(run_dir / "stage_1" / "checkpoints")[0])["head"]
    decoder = torch.load(run_dir / "stage_1" / ".." / "stage_0" / "decoder.pt", weights_only=True)["decoder"]
    assert all(not v.any() for k, v in best0.items() if k.startswith("decoder."))
    assert_trees_equal({k[len("decoder."):]: v for k, v in first1.items() if k.startswith("decoder.")}, decoder)
    assert any(v.any() for v in decoder.values())
    assert not torch.equal(first1["encoder.0.weight"], best0["encoder.0.weight"])
    # observation statistics are frozen from the collection on, at the best stage-0 encoder's
    stats0 = load_policy_files(list_checkpoints(run_dir / "stage_0" / "best")[-1])[1]["obs_normalizer"]
    states1 = [load_policy_files(path)[1]["obs_normalizer"] for path in list_checkpoints(run_dir / "stage_1" / "checkpoints")]
    for state in states1:
        assert_trees_equal(state, stats0)
    # TensorBoard: one run, the stage index steps from 0 to 1 at the boundary (512 encoder steps)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tb")).Reload()
    marks = [(event.step, event.value) for event in events.Scalars("gorl/stage")]
    assert max(step for step, value in marks if value == 0) == 512 and min(step for step, value in marks if value == 1) == 512
    assert "decoder/stage_0/val_loss" in events.Tags()["scalars"]


def test_a_resume_that_would_change_gorls_evaluations_is_refused(reference_run):
    """GoRL's evaluations pick each stage's best encoder, which collects the next decoder's data: a resume with
    another pipeline.eval_every chose stage 0's encoder at step 1024 instead of 512 (an online run may change it)."""
    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.train import run_training

    run_dir, _ = reference_run
    cfg = validate(compose_config([*[a for a in ARGS if not a.startswith("pipeline.eval_every")],
                                   "pipeline.eval_every=4", f"run_dir={run_dir}"]))
    with pytest.raises(ConfigError, match=r"pipeline\.eval_every: 1 -> 4"):
        run_training(cfg, run_dir)


def test_a_resume_that_would_change_the_stage_budgets_is_refused(reference_run):
    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.train import run_training

    run_dir, _ = reference_run
    cfg = validate(compose_config([*[a for a in ARGS if not a.startswith("total_steps")], "total_steps=4096",
                                   f"run_dir={run_dir}"]))
    with pytest.raises(ConfigError, match=r"stage budgets \[512, 1536\]"):
        run_training(cfg, run_dir)


def test_the_run_checkpoint_is_the_combined_policy_of_the_last_best_encoder(reference_run):
    from genpol.api import evaluate, load_policy

    run_dir, summary = reference_run
    policy = load_policy(run_dir)
    best = load_policy_files(list_checkpoints(run_dir / "stage_1" / "best")[-1])[1]
    assert_trees_equal(dict(policy.head.state_dict()), dict(best["head"]))
    obs = torch.randn(8, 2)
    expected = torch.tanh(policy.head.decode(obs, policy.head.distribution(obs)[0]))
    assert torch.equal(policy.act(obs), expected)
    results = evaluate(run_dir, episodes=4)
    assert results["deterministic_return_mean"] == pytest.approx(summary["eval_return_mean"])


def kill_mid_stage_1_and_resume(args, reference, run_dir, directories):
    """Run ``genpol.train args``, SIGKILL it mid stage 1, run it again to the end, and compare the
    latest checkpoint of each of ``directories`` and the summary with the uninterrupted ``reference``."""
    arguments = [*args, f"run_dir={run_dir}"]
    process_env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    interrupted = WarmProcess("genpol.train", arguments, REPO, process_env)  # forked warm: tests/warm_start.py
    marker = run_dir / "stage_1" / "checkpoints" / "step_000000000512"  # mid stage 1 (of 1536 steps)
    deadline = time.time() + 120
    while not marker.exists() and time.time() < deadline and interrupted.poll() is None:
        time.sleep(0.02)
    interrupted.send_signal(signal.SIGKILL)
    assert interrupted.wait(timeout=60) == -signal.SIGKILL, "the run ended before it could be killed"
    assert not (run_dir / "stage_1" / "stage.json").exists()
    resumed = WarmProcess("genpol.train", arguments, REPO, process_env)
    assert resumed.wait(timeout=120) == 0, resumed.stderr.read()

    for directory in directories:
        path_a, path_b = list_checkpoints(reference / directory)[-1], list_checkpoints(run_dir / directory)[-1]
        assert path_a.name == path_b.name
        assert_trees_equal(load_policy_files(path_a)[1], load_policy_files(path_b)[1], directory)
    summary_a, summary_b = (json.loads((d / "summary.json").read_text()) for d in (reference, run_dir))
    for key in ("encoder_env_steps", "collection_env_steps", "total_env_steps", "eval_return_mean"):
        assert summary_a[key] == summary_b[key], key
    # the wall time counts stage 0, run by the killed process, too: it was the resumed process's alone
    stage0, stage1 = summary_b["stages"]
    spent = [stage0[f"{part}_wall_time_s"] for part in ("encoder", "collection", "decoder")]
    assert all(seconds > 0 for seconds in spent) and stage1["encoder_wall_time_s"] > 0
    assert summary_b["wall_time_s"] > sum(spent) + stage1["encoder_wall_time_s"]


def test_resume_mid_stage_after_sigkill_is_bit_identical(reference_run, tmp_path):
    reference, _ = reference_run
    run_dir = tmp_path / "interrupted"
    kill_mid_stage_1_and_resume(ARGS, reference, run_dir, ("checkpoints", "stage_1/checkpoints", "stage_1/best"))
    state_a = load_training_state(list_checkpoints(reference / "stage_1" / "checkpoints")[-1])
    state_b = load_training_state(list_checkpoints(run_dir / "stage_1" / "checkpoints")[-1])
    for key in ("head", "algorithm", "env", "obs", "torch_rng", "global_step"):
        assert_trees_equal(state_a[key], state_b[key], key)


def test_a_redone_decoder_fit_shows_its_epochs_once_in_tensorboard(reference_run, tmp_path, monkeypatch):
    """A decoder fit killed midway is redone from its first epoch on resume; its epochs were logged as they came,
    so TensorBoard showed the redone ones twice. They are logged once the fit is done, as the reference run's."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from genpol.api import train
    from genpol.pipelines.gorl.distill import DecoderTraining

    original = DecoderTraining.fit

    def killed_at_the_third_epoch(self, head, obs, actions, seed, log_epoch=None):
        def log(epoch, row):
            if epoch == 2:
                raise RuntimeError("killed")
            log_epoch(epoch, row)
        return original(self, head, obs, actions, seed, log)

    monkeypatch.setattr(DecoderTraining, "fit", killed_at_the_third_epoch)
    with pytest.raises(RuntimeError, match="killed"):
        train(overrides=ARGS, run_dir=tmp_path / "run")
    monkeypatch.setattr(DecoderTraining, "fit", original)
    train(overrides=ARGS, run_dir=tmp_path / "run")
    counts = []
    for run_dir in (reference_run[0], tmp_path / "run"):
        events = EventAccumulator(str(run_dir / "tb")).Reload()
        counts.append([event.step for event in events.Scalars("decoder/stage_0/val_loss")])
    assert counts[0] == counts[1] and len(counts[0]) == len(set(counts[0]))


def test_a_stop_during_the_collection_or_the_decoder_fit_stops_there_and_the_resume_redoes_it(reference_run, tmp_path,
                                                                                            monkeypatch):
    """SIGTERM checkpointed only after an iteration: the collection and the decoder fit ran to their end (minutes at
    GoRL's sizes, past SLURM's 30 s grace), then stage 1 trained an iteration. They stop at once now, and the resume
    redoes the unfinished one to the uninterrupted run's numbers."""
    from genpol.api import train
    from genpol.errors import TrainingInterrupted
    from genpol.pipelines.gorl import stages
    from genpol.pipelines.gorl.distill import DecoderTraining

    collect, fit = stages.collect_pre_tanh_actions, DecoderTraining.fit
    run_dir, stage_0 = tmp_path / "run", tmp_path / "run" / "stage_0"

    def signalled(work):
        def started(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGTERM)
            return work(*args, **kwargs)
        return started

    monkeypatch.setattr(stages, "collect_pre_tanh_actions", signalled(collect))
    with pytest.raises(TrainingInterrupted, match="^SIGTERM received during the collection for the decoder"):
        train(overrides=ARGS, run_dir=run_dir)
    assert (stage_0 / "stage.json").exists() and not (stage_0 / "collection.pt").exists()
    monkeypatch.setattr(stages, "collect_pre_tanh_actions", collect)
    monkeypatch.setattr(DecoderTraining, "fit", signalled(fit))
    with pytest.raises(TrainingInterrupted, match="^SIGTERM received during the decoder fit"):
        train(overrides=ARGS, run_dir=run_dir)
    assert (stage_0 / "collection.pt").exists() and not (stage_0 / "decoder.pt").exists()
    assert not (run_dir / "stage_1").exists()
    monkeypatch.setattr(DecoderTraining, "fit", fit)
    summary, reference = train(overrides=ARGS, run_dir=run_dir), reference_run[1]
    for key in ("encoder_env_steps", "collection_env_steps", "total_env_steps", "eval_return_mean"):
        assert summary[key] == reference[key], key


@pytest.mark.parametrize("updater", ["ppo", "spo", "aspo", "trpo"])
def test_every_on_policy_updater_trains_the_encoder_and_leaves_the_decoder(updater):
    """One stage-1 update (a trained decoder, stage 1's clip and grad-norm) on real MultiGoal rollouts."""
    from genpol.algorithms import make_algorithm
    from genpol.api import compose_config
    from genpol.build import make_env, make_head
    from genpol.configure import validate
    from genpol.pipelines.gorl.stages import stage_updater
    from genpol.runners.onpolicy import OnPolicyRunner

    args = [a for a in ARGS if not a.startswith(("learner.minibatch_size", "learner.epochs"))]
    cfg = validate(compose_config([*args, f"learner={updater}", "learner.rollout_steps=16"]))
    cfg = stage_updater(cfg, stage=1)
    env = make_env(cfg.env, gamma=cfg.learner.gamma, seed=0)
    head = make_head(cfg.policy, env.obs_dim, env.act_dim)
    head.decoder.load_state_dict(head.new_decoder().state_dict())
    before = {k: v.clone() for k, v in head.state_dict().items()}
    OnPolicyRunner(env, make_algorithm(cfg, head, env), total_steps=256, seed=0).run()
    env.close()
    after = head.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if k.startswith("decoder."))
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("encoder."))
    if updater != "trpo":
        assert (cfg.learner.clip_range, cfg.learner.max_grad_norm) == (0.3, 1.0)


def test_only_a_stage_that_can_have_stale_events_purges_them(tmp_path, monkeypatch):
    """A fresh run's first stage writes no purge: TensorBoard orders event files by name, whose last
    part is a per-process counter compared as text, so a purge at step 1 in a file read after the
    later stages' ("...9" after "...10") dropped all their events (seen once in CI). Stage 0 restarted from step 0
    onto an attempt's events (killed before its first checkpoint) purges them all: it showed that curve twice."""
    import torch.utils.tensorboard

    from genpol.pipelines.gorl.callbacks import StageTensorBoard

    purges = []
    monkeypatch.setattr(torch.utils.tensorboard, "SummaryWriter",
                        lambda log_dir, purge_step=None: purges.append(purge_step) or type("W", (), {
                            "add_text": lambda *a: None, "add_scalar": lambda *a: None})())
    for stage, offset, step in ((0, 0, 0), (1, 512, 0), (0, 0, 256)):
        StageTensorBoard(tmp_path, stage, offset).on_train_start(type("R", (), {"global_step": step})())
    assert purges == [None, 513, 257]
    (tmp_path / "events.out.tfevents.1.host.1.0").write_bytes(b"")  # the killed attempt's file
    for stage, offset, step in ((0, 0, 0), (1, 512, 0)):
        StageTensorBoard(tmp_path, stage, offset).on_train_start(type("R", (), {"global_step": step})())
    assert purges[3:] == [0, 513]


def test_a_stage_change_on_an_env_without_state_does_not_warn_of_a_resume(tmp_path, recwarn, caplog):
    """Every stage after the first restores the env as the encoder left it; a backend without simulator state
    (EnvPool, a custom env without state_dict) warned "the resumed run cannot continue its episodes" at each
    stage change of a run never stopped. It is logged as what it is: the stage starts on new episodes."""
    import logging

    from genpol.api import train

    overrides = [item for item in ARGS if not item.startswith(("env=", "env.normalize_obs", "total_steps",
                                                               "pipeline.collect_steps"))]
    with caplog.at_level(logging.INFO, logger="genpol.pipelines.gorl.stages"):
        train("custom:custom_envs.batched:make_env_without_state", total_steps=512, run_dir=tmp_path / "run",
              overrides=[*overrides, "env.num_envs=2", "pipeline.collect_steps=256"])
    assert not [w for w in recwarn if "cannot continue its episodes" in str(w.message)]
    assert any("stage 1 starts on new episodes" in record.message for record in caplog.records)

"""Every shipped config end to end, with the final video on: each ``configs/env`` group, each
``configs/policy`` head and each ``+experiment`` bundle trains a tiny budget, leaves a checkpoint,
and writes an mp4 that decodes to non-blank frames (or, where an env cannot render, the documented
warning and ``summary["missing"]["video"]``). This is the test that catches a config whose final
evaluation or video breaks after training - the way Pendulum once lost its weights to a missing
pygame."""

import sys
from pathlib import Path

import pytest

from genpol.api import compose_config
from genpol.configure import validate
from genpol.train import run_training

from conftest import REPO, assert_nonblank_mp4

sys.path.insert(0, str(REPO / "docs" / "examples"))  # policy=custom trains the docs tutorial's head


CONFIGS = Path(__file__).resolve().parent.parent / "configs"
SMALL = ["env.num_envs=2", "env.workers=1", "env.render_width=64", "env.render_height=64", "env.max_episode_steps=40",
         "pipeline.eval_episodes=1", "logger.progress_bar=false", "logger.tensorboard=false"]
ON_POLICY = ["learner.rollout_steps=8", "learner.minibatch_size=16", "learner.epochs=1", "total_steps=64"]
OFF_POLICY = ["learner.learning_starts=16", "learner.iteration_steps=32", "learner.batch_size=16",
              "learner.critic_hidden_sizes=[32,32]", "policy.hidden_sizes=[32,32]", "total_steps=64"]
SMALL_DIFFUSION = ["policy.denoising_steps=4", "policy.ft_denoising_steps=4", "policy.hidden_sizes=[32,32,32]",
                   "policy.critic_hidden_sizes=[32,32]"]
OFFLINE = ["pipeline.pretrain_steps=20", "pipeline.pretrain_log_every=10"]

CASES = {
    # env groups (Gaussian PPO)
    **{f"env-{name}": [f"env={name}", *ON_POLICY] for name in
       ("halfcheetah", "hopper", "walker2d", "pendulum", "dmc", "multigoal", "multigoal_softlearning")},
    "env-gym": ["env=gym", "env.id=MountainCarContinuous-v0", *ON_POLICY],
    "env-envpool": ["env=envpool", "env.id=HalfCheetah-v5", *ON_POLICY],
    "env-pointmaze_medium": ["env=pointmaze_medium", *ON_POLICY],
    "env-custom": ["env=custom", "env.id=custom_envs.batched:make_env", *ON_POLICY],
    # CartpoleBalance with 4 envs for training and evaluation, as test_playground.py: one MJX
    # compilation shared in this process (the group's CheetahRun costs minutes of compilation on CPU)
    "env-playground": ["env=playground", "env.id=CartpoleBalance", *ON_POLICY, "env.num_envs=4",
                       "pipeline.eval_episodes=4", "learner.rollout_steps=4", "total_steps=16"],
    # policy heads (on Pendulum, with an on-policy updater; tanh_gaussian also with SAC below)
    "policy-diffusion": ["env=pendulum", "policy=diffusion", *SMALL_DIFFUSION, *ON_POLICY, "total_steps=128"],
    # DDIM in 5 of K = 20 steps, all fine-tuned: valid from scratch (no frozen early steps)
    "policy-diffusion_ddim": ["env=pendulum", "policy=diffusion_ddim", "policy.hidden_sizes=[32,32,32]",
                              "policy.critic_hidden_sizes=[32,32]", *ON_POLICY, "total_steps=128"],
    "policy-fpo": ["env=pendulum", "policy=fpo", *ON_POLICY],
    "policy-policyflow": ["env=pendulum", "policy=policyflow", *ON_POLICY],
    "policy-tanh_gaussian": ["env=pendulum", "policy=tanh_gaussian", *ON_POLICY],
    "policy-normalizing_flow": ["env=pendulum", "policy=normalizing_flow", "policy.coupling_hidden_sizes=[16]", *ON_POLICY],
    "policy-custom": ["env=pendulum", "policy=custom", "policy.family=laplace_head:LaplaceHead", *ON_POLICY],
    "policy-consistency": ["env=pendulum", "policy=consistency", "policy.hidden_sizes=[32,32,32]",
                           "policy.critic_hidden_sizes=[32,32]", *ON_POLICY],
    "policy-gorl": ["env=pendulum", "policy=gorl", *ON_POLICY],
    # bundles, as shipped but for their budgets (and compilation off where it only costs time here)
    "experiment-default": ["+experiment=default", *ON_POLICY, "learner.compile=false"],
    "experiment-default_fast": ["+experiment=default_fast", *ON_POLICY, "learner.compile=false"],
    "experiment-ppo_mujoco": ["+experiment=ppo_mujoco", *ON_POLICY, "learner.compile=false"],
    "experiment-ppo_hopper": ["+experiment=ppo_hopper", *ON_POLICY, "learner.compile=false"],
    "experiment-ppo_fast": ["+experiment=ppo_fast", *ON_POLICY],
    "experiment-ppo_fast_envpool": ["+experiment=ppo_fast_envpool", *ON_POLICY],
    "experiment-trpo_mujoco": ["+experiment=trpo_mujoco", "learner.rollout_steps=8", "total_steps=64"],
    "experiment-fpo": ["+experiment=fpo", *ON_POLICY],
    "experiment-policyflow": ["+experiment=policyflow", *ON_POLICY, "pipeline.compile_sampling=false"],
    # GoRL: two stages on MultiGoal (collection and a decoder fit between them), the video of the final policy
    "experiment-gorl": ["+experiment=gorl", "env=multigoal", *ON_POLICY, "pipeline.stage_weights=[1,1]",
                        "pipeline.collect_steps=64", "pipeline.decoder_epochs=2", "pipeline.decoder_batch_size=16"],
    "experiment-sac": ["+experiment=sac", "env=hopper", *OFF_POLICY],
    # compiled, EXPO's critic step is checked against eager in test_expo.py (here it would only cost time)
    "experiment-expo": ["+experiment=expo", "env=hopper", *OFF_POLICY, "learner.compile=false", "learner.num_qs=3",
                        "learner.utd=2", "learner.num_samples=3", "learner.n_edit=2", "policy.denoising_steps=3",
                        "policy.ft_denoising_steps=3", "DATASET"],
    "policy-diffusion_expo": ["env=pendulum", "policy=diffusion_expo", *SMALL_DIFFUSION, *ON_POLICY],
    # EXPO's base as their code builds it (denoiser=expo, vp schedule, their sampler) under EXPO's learner
    "policy-diffusion_expo_authors": ["+experiment=expo", "policy=diffusion_expo_authors", "env=hopper", *OFF_POLICY,
                                      "learner.compile=false", "learner.num_qs=3", "learner.utd=2", "learner.num_samples=3",
                                      "learner.n_edit=2", "policy.hidden_sizes=[32,32]", "policy.time_dim=8",
                                      "learner.base_weight_decay=1e-4", "DATASET"],
    # MaxEntDP at toy sizes (its paper sizes cost ~3 s per gradient step), and its head under PPO
    "experiment-maxentdp": ["+experiment=maxentdp", "env=hopper", *OFF_POLICY, "learner.candidates=8",
                            "learner.log_prob_levels=3", "learner.log_prob_draws=2", "policy.sampling_steps=4",
                            "policy.time_hidden_sizes=[16,16]", "pipeline.eval_every=1", "pipeline.checkpoint_every=1"],
    "policy-vp_diffusion": ["env=pendulum", "policy=vp_diffusion", "policy.sampling_steps=4",
                            "policy.hidden_sizes=[32,32]", "policy.time_hidden_sizes=[16,16]", *ON_POLICY],
    # MEow at toy sizes on MuJoCo and on MultiGoal, and its head under PPO
    **{f"experiment-{bundle}": [f"+experiment={bundle}", *extra, "learner.learning_starts=16", "learner.iteration_steps=32",
                                "learner.batch_size=16", "policy.base_hidden_sizes=[16]", "total_steps=64",
                                "policy.coupling_hidden_sizes=[16,16]", "policy.shift_hidden_sizes=[16]",
                                "pipeline.eval_every=1", "pipeline.checkpoint_every=1"]
       for bundle, extra in (("meow", ["env=hopper"]), ("meow_multigoal", []))},
    "policy-energy_flow": ["env=pendulum", "policy=energy_flow", "policy.coupling_hidden_sizes=[16]", *ON_POLICY],
    "experiment-rlpd": ["+experiment=rlpd", "env=hopper", *OFF_POLICY, "learner.num_qs=3", "learner.utd=2",
                        "DATASET"],
    "experiment-consistency_ac": ["+experiment=consistency_ac", "policy.hidden_sizes=[32,32,32]", "DATASET",
                                  "learner.critic_hidden_sizes=[32,32]", "learner.learning_starts=16", "learner.batch_size=16",
                                  "learner.iteration_steps=32", "learner.act_candidates=4", "total_steps=64", *OFFLINE],
    # 8.3's per-task bundles: consistency_ac with another env and eta, each on its own task's data
    **{f"experiment-consistency_ac_{task}": [f"+experiment=consistency_ac_{task}", "policy.hidden_sizes=[32,32,32]",
                                             f"DATASET:{name}", "learner.critic_hidden_sizes=[32,32]",
                                             "learner.learning_starts=16", "learner.batch_size=16",
                                             "learner.iteration_steps=32", "learner.act_candidates=4", "total_steps=64",
                                             *OFFLINE]
       for task, name in (("halfcheetah", "HalfCheetah"), ("walker2d", "Walker2d"))},
    # action chunks: consistency BC on chunks of 4, then PPO acting 4 steps per decision
    "policy-consistency-chunks": ["env=hopper", "policy=consistency", "policy.act_steps=4", "policy.horizon_steps=4",
                                  "policy.hidden_sizes=[32,32,32]", "pipeline=offline_to_online", *ON_POLICY,
                                  "total_steps=128", *OFFLINE, "DATASET"],
    "experiment-dppo_hopper": ["+experiment=dppo_hopper", *SMALL_DIFFUSION, "policy.ft_denoising_steps=2",
                               *ON_POLICY, "total_steps=128", *OFFLINE, "pipeline.compile_sampling=false",
                               "DATASET"],
}


def test_every_shipped_group_and_bundle_is_covered():
    groups = {f"env-{p.stem}" for p in (CONFIGS / "env").glob("*.yaml")}
    groups |= {f"policy-{p.stem}" for p in (CONFIGS / "policy").glob("*.yaml") if p.stem != "gaussian"}
    groups |= {f"experiment-{p.stem}" for p in (CONFIGS / "experiment").glob("*.yaml")}
    assert groups <= set(CASES), sorted(groups - set(CASES))  # gaussian: every env-* case uses it



@pytest.mark.parametrize("case", sorted(CASES))
def test_config_trains_checkpoints_and_records_a_video(tmp_path, case, request):
    overrides = list(CASES[case])
    if "env=envpool" in overrides or "+experiment=ppo_fast_envpool" in overrides:
        pytest.importorskip("envpool", reason="the envpool extra is not installed")
    for i, item in enumerate(overrides):
        if item.startswith("DATASET"):  # DATASET: Hopper's random data; DATASET:<Task>: that task's
            task = item.partition(":")[2] or "Hopper"
            overrides[i] = f"dataset.path={request.getfixturevalue('random_dataset')(task)}"
    run_dir = tmp_path / "run"
    small = [item for item in SMALL if not any(item.split("=")[0] == o.split("=")[0] for o in overrides)]
    cfg = validate(compose_config([*overrides, *small, f"run_dir={run_dir}",
                                   f"pipeline.video_dir={tmp_path / 'videos'}"]))
    summary = run_training(cfg, run_dir)
    assert summary["checkpoint"] and Path(summary["checkpoint"]).is_dir()
    assert summary["missing"] == {}, summary["missing"]
    assert_nonblank_mp4(summary["video"])

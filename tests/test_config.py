"""Structured configs: documented fields, and bad values caught before training, naming the key."""

import ast
import inspect
import re
import textwrap
from pathlib import Path

import pytest
import torch

from genpol.api import compose_config
from genpol.algorithms.registry import LEARNERS
from genpol.config import ALL_SCHEMAS, ConfigError
from genpol.configure import validate
from genpol.heads import build_head
from genpol.updaters.losses import PPOClipLoss

from conftest import run_cli


def test_every_config_field_has_a_docstring():
    missing = []
    for schema in [*ALL_SCHEMAS, *(row.schema for row in LEARNERS.values())]:
        body = ast.parse(textwrap.dedent(inspect.getsource(schema))).body[0].body
        for i, node in enumerate(body):
            if isinstance(node, ast.AnnAssign) and "ClassVar" not in ast.unparse(node.annotation):
                following = body[i + 1] if i + 1 < len(body) else None
                documented = (isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                              and isinstance(following.value.value, str) and following.value.value.strip())
                if not documented:
                    missing.append(f"{schema.__name__}.{node.target.id}")
    assert not missing, f"fields without a docstring: {missing}"


def test_default_config_composes_and_validates():
    cfg = validate(compose_config(["run_dir=/tmp/x"]))
    assert cfg.env.full_id == "gym:HalfCheetah-v5" and cfg.policy.family == "gaussian"
    assert cfg.learner.name == "ppo" and cfg.learner.minibatch_size == 64


def test_the_bundles_evaluate_as_their_authors_do():
    """Ding & Jin's ``eval_policy`` and EXPO's ``eval_actions`` act as in training (fresh draws every step),
    so their bundles evaluate with ``pipeline.eval_deterministic=false``; everything else deterministically."""
    acting = {experiment: compose_config([f"+experiment={experiment}"]).pipeline.eval_deterministic
              for experiment in ("consistency_ac", "expo", "rlpd")}
    assert acting == {"consistency_ac": False, "expo": False, "rlpd": True}
    assert validate(compose_config(["run_dir=/tmp/x"])).pipeline.eval_deterministic is True


EXPERIMENTS = sorted(path.stem for path in (Path(__file__).parent.parent / "configs" / "experiment").glob("*.yaml"))


def test_each_schema_is_stored_once_and_again_when_its_entry_was_replaced():
    """compose_config registers the schemas every time: an unchanged one is not rebuilt (70 ms a
    compose), and one whose ConfigStore entry someone else replaced is stored again."""
    from hydra.core.config_store import ConfigStore

    from genpol.configure import _store_entry, register_configs

    register_configs()
    entry = _store_entry("learner", "schema_ppo")
    register_configs()
    assert _store_entry("learner", "schema_ppo") is entry
    ConfigStore.instance().store(group="learner", name="schema_ppo", node={"not_ppo": 1})
    register_configs()
    restored = _store_entry("learner", "schema_ppo")
    assert restored is not entry and "rollout_steps" in restored.node and "not_ppo" not in restored.node
    assert validate(compose_config(["learner=ppo", "learner.rollout_steps=64"])).learner.rollout_steps == 64


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_bundle_composes_and_validates(experiment):
    """The README and bench scripts point users at these bundles: each must compose into a valid config."""
    # offline-to-online bundles, and those that mix offline data into every batch (rlpd, expo), name no default
    needs_data = experiment.startswith(("dppo_hopper", "consistency_ac", "rlpd", "expo"))
    extra = ["dataset.path=data/hopper_medium-v5.hdf5"] if needs_data else []
    cfg = validate(compose_config([f"+experiment={experiment}", "run_dir=/tmp/x", *extra]))
    assert cfg.total_steps > 0
    if experiment == "fpo":
        assert cfg.policy.family == "fpo" and cfg.learner.clip_range == 0.05
    if experiment.startswith("consistency_ac"):  # 8.3's per-task eta: 0.1 hopper-medium, 1.0 halfcheetah/walker2d
        task = experiment.removeprefix("consistency_ac").strip("_") or "hopper"
        assert cfg.env.id.lower().startswith(task) and cfg.learner.eta == (0.1 if task == "hopper" else 1.0)
    if experiment == "default":  # the measured make-train run: HalfCheetah at the zoo's initial std e^-2
        assert cfg.env.id == "HalfCheetah-v5" and cfg.policy.log_std_init == -2.0
    if experiment == "default_fast":  # exactly make train's run with 128-128 networks, as benchmarked
        assert cfg == validate(compose_config(["+experiment=default", "run_dir=/tmp/x", "policy.hidden_sizes=[128,128]",
                                               "policy.critic_hidden_sizes=[128,128]"]))
    if experiment == "ppo_hopper":  # the bundle is the benchmarked job (bench/learning.py stability)
        import importlib.util
        spec = importlib.util.spec_from_file_location("learning", Path(__file__).parent.parent / "bench" / "learning.py")
        learning = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(learning)
        job = [o for o in learning.SUITES["stability"]["hopper-std1-adaptivekl0.01"] if not o.startswith("pipeline.")]
        assert cfg == validate(compose_config([*job, "run_dir=/tmp/x", "total_steps=1000000"]))


@pytest.mark.parametrize("override,message", [
    ("learner.clip_range=1.5", r"learner.clip_range must be in \(0, 1\), got 1.5"),
    ("env.num_envs=0", r"env.num_envs must be >= 1, got 0"),
    ("learner.lr_schedule=cosine", r"learner.lr_schedule must be constant, linear or adaptive, got 'cosine'"),
    ("learner=trpo learner.line_search_shrink=1.5", r"learner.line_search_shrink must be in \(0, 1\)"),
    ("policy.activation=sigmoid", r"policy.activation must be one of"),
    ("total_steps=-5", r"total_steps must be >= 1, got -5"),
    ("update_threads=-1", r"update_threads must be >= 0 \(0: torch_threads\), got -1"),
    ("policy=diffusion_ddim policy.ddim_eval_eta=2", r"policy.ddim_eval_eta must be in \[0, 1\], got 2"),
    ("policy=diffusion_ddim policy.clamp_gradient=tanh", r"policy.clamp_gradient must be one of \('inward', 'straight_through'"),
    # Diffusion-QL with DPPO's chunks of 4 used to fail deep in the critic on a [B, 3] vs [B, 12] shape
    ("policy=diffusion learner=consistency_ac policy.ft_denoising_steps=20",
     r"learner=consistency_ac learns from one-step transitions .* policy=diffusion acts in chunks "
     r"\(policy.act_steps=4, policy.horizon_steps=4\): set policy.act_steps=1 policy.horizon_steps=1"),
    # ... but a head the learner cannot train at all hears that first
    ("policy=consistency policy.act_steps=4 policy.horizon_steps=4 learner=sac",
     r"policy=consistency with learner=sac: .*log-prob"),
    ("policy=consistency learner=consistency_ac learner.offline_lr_decay=true",
     r"learner.offline_lr_decay decays the learning rate over the offline phase .* pipeline=online has none"),
    # the options of the online phase (pipeline=offline_to_online): fields, values, and who can change them
    *[(f"+experiment=consistency_ac dataset.path=d.hdf5 {override}", message) for override, message in [
        ("+pipeline.online_learner.batch_size=4",
         r"pipeline.online_learner: learner=consistency_ac cannot change \['batch_size'\] between the phases; it "
         r"can change \['bc_coef', 'critic_lr', 'eta', 'lr'\]"),
        ("+pipeline.online_learner.eta=-1", r"pipeline.online_learner: learner.eta must be >= 0, got -1"),
        ("+pipeline.online_learner.eta=fast", r"pipeline.online_learner.eta: Value 'fast' of type 'str' could not"),
        ("+pipeline.online_policy.sampling_steps=0", r"pipeline.online_policy: policy.sampling_steps must be >= 1"),
        ("+pipeline.online_policy.hidden_sizes=[8]",
         r"policy=consistency cannot change \['hidden_sizes'\] once built; it can change \['sampling_steps'\]"),
        ("pipeline.online_reset=[targets,critics]",
         r"pipeline.online_reset must be distinct items of \['optimizers', 'targets', 'step_counts'\], got "
         r"\['targets', 'critics'\]")]],
    ("pipeline=offline_to_online dataset.path=d.hdf5 +pipeline.online_learner.lr=1e-5",
     r"learner=ppo is built for the online phase only .* set learner.lr=1e-05 instead"),
    ("pipeline=offline_to_online dataset.path=d.hdf5 pipeline.online_reset=[optimizers]",
     r"learner=ppo is built for the online phase only .* remove pipeline.online_reset"),
    ("pipeline=offline_to_online dataset.path=d.hdf5 +pipeline.online_policy.sampling_steps=4",
     r"policy=gaussian cannot change \['sampling_steps'\] once built; it can change none of its fields"),
])
def test_out_of_range_values_name_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        validate(compose_config(["run_dir=/tmp/x", *override.split()]))


@pytest.mark.parametrize("override,key", [
    ("learner.lrr=0.1", "lrr"),  # misspelt key
    ("learner.lr=fast", "learner.lr"),  # wrong type
    ("env.num_envs=2.5", "env.num_envs"),
    ("policy.hidden_sizes=abc", "policy.hidden_sizes"),
])
def test_misspelt_keys_and_wrong_types_fail_at_composition(override, key):
    with pytest.raises(ConfigError) as info:
        compose_config(["run_dir=/tmp/x", override])
    assert key in str(info.value) or key in str(info.value.__cause__)


def test_cli_rejects_bad_input_before_training(tmp_path):
    """The command line's exit 2 and one-line message for a value out of range, a mandatory value left
    out and a buffer too large. (The messages themselves, a misspelt key and a misspelt env id are
    checked in-process above and in test_envs.py; an env error at the CLI in test_custom_envs.py.)"""
    result = run_cli("-m", "genpol.train", "learner.clip_range=2", f"run_dir={tmp_path}/b", check=False)
    assert result.returncode == 2 and "learner.clip_range must be in (0, 1), got 2.0" in result.stderr
    # a mandatory value left out: one line that names the key and shows an example, exit 2
    result = run_cli("-m", "genpol.train", "env=custom", f"run_dir={tmp_path}/d", check=False)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith(
        "genpol: ConfigError: env.id is required and has no default: set it, e.g. env.id=Pendulum-v1")
    assert "Traceback" not in result.stderr and "MissingMandatoryValue" not in result.stderr
    with pytest.raises(ConfigError, match=r"^env.id is required and has no default: set it, e.g. env.id=Pendulum-v1"):
        validate(compose_config(["env=gym", f"run_dir={tmp_path}/g"]))  # the same for every env group
    # a replay buffer that cannot fit: refused before it is allocated, naming the key and both sizes
    result = run_cli("-m", "genpol.train", "+experiment=sac", "env=hopper", "learner.buffer_size=100000000000",
                     f"run_dir={tmp_path}/e", check=False)
    assert result.returncode == 2 and re.search(
        r"learner.buffer_size=100000000000 needs 21.0 TB for the replay buffer and its copy in each checkpoint "
        r"\(or learner.save_replay=false\), but cpu has [0-9.]+ [kMGT]?B available: lower learner.buffer_size",
        result.stderr), result.stderr[-2000:]
    for name in "bde":
        assert not (tmp_path / name / "checkpoints").exists()


def test_memory_is_checked_against_what_the_device_has(monkeypatch):
    """require_memory's rule and message, by hand: 105 bytes per Hopper transition (2 x 11 + 3 + 1
    floats and a bool), refused above what the device reports available, silent where it says nothing."""
    from genpol import memory
    from genpol.storage.replay import ReplayBuffer

    real = memory.available_bytes("cpu")  # /proc/meminfo's MemAvailable on this Linux machine
    assert isinstance(real, int) and 10**8 < real < 10**14
    assert ReplayBuffer.bytes_for(1_000_000, 11, 3) == 105_000_000
    assert memory.human_bytes(999) == "999 B" and memory.human_bytes(105_000_000) == "105.0 MB"
    monkeypatch.setattr(memory, "available_bytes", lambda device: 100_000_000)
    memory.require_memory("learner.buffer_size", 900_000, ReplayBuffer.bytes_for(900_000, 11, 3), "cpu", "x")
    with pytest.raises(ConfigError, match=r"learner.buffer_size=1000000 needs 105.0 MB for the replay buffer, but cpu "
                                          r"has 100.0 MB available: lower learner.buffer_size"):
        memory.require_memory("learner.buffer_size", 1_000_000, 105_000_000, "cpu", "the replay buffer")
    monkeypatch.setattr(memory, "available_bytes", lambda device: None)
    memory.require_memory("learner.buffer_size", 10**11, 10**13, "cpu", "the replay buffer")


def test_the_replay_check_counts_the_checkpoints_host_copy_only_when_the_replay_is_saved(monkeypatch):
    """A checkpoint copies the replay's rows to host memory beside the buffer (a resume loads them there):
    with save_replay a CPU run needs twice the buffer, 210 bytes per Hopper transition; without, once."""
    from types import SimpleNamespace

    from genpol import memory
    from genpol.algorithms.sac import SAC
    from genpol.build import make_head

    monkeypatch.setattr(memory, "available_bytes", lambda device: 15_000_000)
    hopper = SimpleNamespace(obs_dim=11, act_dim=3, num_envs=1)
    saved = validate(compose_config(["+experiment=sac", "env=hopper", "learner.buffer_size=100000",
                                     "learner.compile=false"]))
    with pytest.raises(ConfigError, match=r"^learner.buffer_size=100000 needs 21.0 MB for the replay buffer and "
                                          r"its copy in each checkpoint \(or learner.save_replay=false\), but cpu "
                                          r"has 15.0 MB available"):
        SAC.build(saved, None, hopper)
    unsaved = validate(compose_config(["+experiment=sac", "env=hopper", "learner.buffer_size=100000",
                                       "learner.save_replay=false", "learner.compile=false"]))
    learner = SAC.build(unsaved, make_head(unsaved.policy, 11, 3), hopper)  # 10.5 MB fit (allocated, not touched)
    assert learner.replay.capacity == 100_000


def test_a_rollout_that_cannot_fit_is_refused_before_it_is_allocated():
    """The rollout's bytes for a Gaussian head on Hopper, by hand (11 observation floats, five float and
    two bool fields, a record of action 3 + log-prob 1 + mean 3 + log-std 3 floats: 106 bytes a step,
    and the observation after the rollout, 44 bytes an env; and the shuffled copy an epoch gathers, measured
    against the bytes one epoch of minibatches holds) and against the tensors a filled RolloutStorage holds;
    a config of 10^9 steps is refused naming learner.rollout_steps, and measuring the record draws nothing from
    the run's random stream."""
    from types import SimpleNamespace

    from genpol.algorithms.onpolicy import rollout_bytes
    from genpol.algorithms.registry import build_on_policy
    from genpol.api import compose_config
    from genpol.heads import GaussianHead
    from genpol.storage import RolloutStorage

    head = GaussianHead(11, 3)
    torch.manual_seed(7)
    # and an epoch's shuffled copy: observation, advantages, returns, values and the record, 44 + 12 + 40 bytes,
    # counted with 4 bytes to spare for the sub-sequence path's two flags and rewards
    assert rollout_bytes(head, 64, 2, 11, torch.device("cpu")) == (64 * 2 * (44 + 20 + 2 + 40) + 2 * 44
                                                                   + 64 * 2 * (44 + 16 + 40))
    after = torch.rand(3)
    torch.manual_seed(7)
    assert torch.equal(after, torch.rand(3))  # the random stream untouched
    storage = RolloutStorage(64, 2, 11)
    _, record = head.sample(torch.zeros(2, 11))
    storage.add(torch.zeros(2, 11), record, torch.zeros(2), torch.zeros(2), torch.zeros(2, dtype=torch.bool),
                torch.zeros(2, dtype=torch.bool))
    held = [*(value for value in vars(storage).values() if isinstance(value, torch.Tensor)),
            *storage.records.values()]
    assert sum(t.numel() * t.element_size() for t in held) == 64 * 2 * (44 + 20 + 2 + 40) + 2 * 44
    for _ in range(63):
        storage.add(torch.zeros(2, 11), record, torch.zeros(2), torch.zeros(2), torch.zeros(2, dtype=torch.bool),
                    torch.zeros(2, dtype=torch.bool))
    batches = list(storage.minibatches(32))  # what one epoch gathers: the storages its minibatches slice
    gathered = {tensor.untyped_storage().data_ptr(): tensor.untyped_storage().nbytes() for batch in batches
                for tensor in (batch.obs, batch.advantages, batch.returns, batch.values, *batch.record.values())}
    _, one_sample = head.sample(torch.zeros(1, 11))
    assert sum(gathered.values()) == 64 * 2 * (44 + 12 + 40)
    assert RolloutStorage.epoch_copy_bytes(64, 2, 11, one_sample) == 64 * 2 * (44 + 16 + 40)
    # sub-sequences of 16 steps, gathered a minibatch at a time; at most the whole rollout in one minibatch, with a
    # bootstrap observation per sub-sequence (a 4 x 11-byte observation per 16 steps here, not counted before)
    from genpol.storage.sequences import sequence_minibatches

    (whole,) = sequence_minibatches(storage.obs, storage.records, storage.rewards, storage.terminated,
                                    storage.truncated, storage.values, storage.last_obs, 16, 8)
    held = [whole.obs, whole.rewards, whole.terminated, whole.truncated, whole.values, whole.bootstrap_obs,
            *whole.record.values()]
    assert sum(t.untyped_storage().nbytes() for t in held) == 64 * 2 * (44 + 10 + 40) + 8 * 44
    assert RolloutStorage.epoch_copy_bytes(64, 2, 11, one_sample, 16) == 64 * 2 * (44 + 16 + 40) + 8 * 44
    cfg = validate(compose_config(["env=hopper", "learner.rollout_steps=1000000000", "run_dir=/tmp/x"]))
    with pytest.raises(ConfigError, match=r"learner.rollout_steps=1000000000 needs [0-9.]+ [GT]B for the rollout storage "
                                          r"of env.num_envs=8 envs and the model, but cpu has .* available: lower "
                                          r"learner.rollout_steps"):
        build_on_policy(cfg, head, SimpleNamespace(obs_dim=11, act_dim=3, num_envs=8))


def test_a_dataset_that_cannot_fit_is_refused_before_its_arrays_are_read(tmp_path, monkeypatch):
    """A D4RL file or a Minari dataset whose arrays (three copies: read, dataset, replay) exceed the memory
    available."""
    import numpy as np

    from genpol import memory
    from genpol.data import load_d4rl, write_d4rl

    path = tmp_path / "tiny.hdf5"
    write_d4rl(path, np.zeros((100, 3), np.float32), np.zeros((100, 2), np.float32), np.zeros(100, np.float32),
               np.zeros(100, bool), np.zeros(100, bool), next_observations=np.zeros((100, 3), np.float32))
    assert load_d4rl(path).observations.shape == (100, 3)  # fits: read as usual
    import gymnasium as gym

    from genpol.data.minari_io import load_minari, write_minari

    episode = {"observations": np.zeros((101, 3)), "actions": np.zeros((100, 2)), "rewards": np.zeros(100),
               "terminations": np.zeros(100, bool), "truncations": np.arange(100) == 99}
    write_minari("genpol/tiny/memory-v0", [episode], gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)),
                 root=tmp_path / "minari")
    assert load_minari("genpol/tiny/memory-v0", root=tmp_path / "minari").observations.shape == (100, 3)
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1000)
    with pytest.raises(ConfigError, match=rf"dataset.path={path} needs [0-9.]+ kB for its arrays and their copies "
                                          r"in memory, but cpu has 1.0 kB available"):
        load_d4rl(path)
    with pytest.raises(ConfigError, match=r"dataset.path=genpol/tiny/memory-v0 needs 16.8 kB for its arrays and "
                                          r"their copies in memory, but cpu has 1.0 kB available"):
        load_minari("genpol/tiny/memory-v0", root=tmp_path / "minari")


DPPO_FILE = ["dataset.path=data/hopper_medium-v5.hdf5"]  # composing only: the file is never opened


def test_diffusion_from_scratch_must_fine_tune_every_step():
    """With K' < K the first K - K' denoising steps run a frozen copy of the pretrained weights. A run
    that pretrains nothing would leave them at their random initialization, so it is refused, with the fix."""
    scratch = ["run_dir=/tmp/x", "policy=diffusion", "env=hopper"]
    with pytest.raises(ConfigError, match=r"policy.ft_denoising_steps=10 fine-tunes only the last 10 of 20 "
                                          r".*random initialization.*policy.ft_denoising_steps=20"):
        validate(compose_config(scratch))
    with pytest.raises(ConfigError, match=r"pipeline=offline_to_online with pretrain_steps=0 pretrains nothing"):
        validate(compose_config([*scratch, "pipeline=offline_to_online", "pipeline.pretrain_steps=0", *DPPO_FILE]))
    with pytest.raises(ConfigError, match=r"^policy.denoising_steps must be >= 1"):  # it named ft_denoising_steps
        validate(compose_config([*scratch, "policy.denoising_steps=0"]))
    with pytest.raises(ConfigError, match=r"ft_denoising_steps=3 fine-tunes only the last 3 of 5"):
        validate(compose_config([*scratch, "policy.use_ddim=true", "policy.ddim_steps=5",
                                 "policy.ft_denoising_steps=3"]))
    # every step trains: accepted, and the head has no frozen copy at all
    cfg = validate(compose_config([*scratch, "policy.ft_denoising_steps=20", "policy.hidden_sizes=[8,8,8]"]))
    head = build_head(cfg.policy.family, 11, 12, **cfg.policy.head_kwargs())
    assert head.frozen_denoiser is None and all(p.requires_grad for p in head.parameters())
    # pretraining fills the frozen copy: K' < K is DPPO's fine-tuning setting
    validate(compose_config([*scratch, "pipeline=offline_to_online", *DPPO_FILE]))
    # ... by behaviour cloning only: Diffusion-QL's offline phase trains every step by its own loss
    with pytest.raises(ConfigError, match=r"learner=consistency_ac's offline phase trains by its own loss"):
        validate(compose_config([*scratch, "pipeline=offline_to_online", "learner=consistency_ac", *DPPO_FILE,
                                 "policy.act_steps=1", "policy.horizon_steps=1"]))


def _effective_clip(cfg) -> torch.Tensor:
    """The clip each denoising step of ``cfg``'s diffusion head gets from ``cfg``'s PPO loss, ``[K']``."""
    head = build_head(cfg.policy.family, 11, 12, **{**cfg.policy.head_kwargs(), "hidden_sizes": [8, 8, 8]})
    obs = torch.zeros(1, 11)
    with torch.no_grad():
        terms = head.log_ratio(obs, head.sample(obs)[1])
    loss = PPOClipLoss(clip_range=cfg.learner.clip_range)
    return torch.as_tensor(loss.clip_for(terms.unit_clip)).expand(terms.log_ratio.shape[-1])


def test_updater_clip_range_is_the_one_source_of_the_diffusion_clip():
    """dppo_hopper's learner.clip_range used to be overridden by the head's own per-step clip (0.01 either
    way, so a change of clip_range did nothing)."""
    dppo = ["run_dir=/tmp/x", "+experiment=dppo_hopper", *DPPO_FILE]
    assert torch.allclose(_effective_clip(validate(compose_config([*dppo, "learner.clip_range=0.05"]))),
                          torch.full((10,), 0.05))
    # a schedule: policy.clip_base at the noisiest step, rising to learner.clip_range at the last
    schedule = _effective_clip(validate(compose_config([*dppo, "learner.clip_range=0.05", "policy.clip_base=0.001"])))
    assert schedule[0].item() == pytest.approx(0.001) and schedule[-1].item() == pytest.approx(0.05)
    assert (schedule.diff() > 0).all()
    # both ends set the last step's clip: only if they agree
    validate(compose_config([*dppo, "learner.clip_range=0.05", "policy.clip_final=0.05"]))
    with pytest.raises(ConfigError, match=r"policy.clip_final=0.02 and learner.clip_range=0.05 both set"):
        validate(compose_config([*dppo, "learner.clip_range=0.05", "policy.clip_final=0.02"]))
    with pytest.raises(ConfigError, match=r"policy.clip_base must be null with learner=trpo"):
        validate(compose_config(["run_dir=/tmp/x", "policy=diffusion", "learner=trpo", "pipeline=offline_to_online",
                                 *DPPO_FILE, "policy.clip_base=0.001"]))


def _cites(experiment: str, paper: str) -> bool:
    text = (Path(__file__).parent.parent / "configs" / "experiment" / f"{experiment}.yaml").read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    return re.search(rf"\b{paper}\b", header) is not None


# DPPO and SPO write c' * 0.5 * mean((R - V)^2) with c' = 0.5; genpol's loss is vf_coef * mean((R - V)^2)
PAPER_VF_COEF = {"DPPO": 0.5 * 0.5, "SPO": 0.5 * 0.5}
CITING = [(experiment, paper) for experiment in EXPERIMENTS for paper in PAPER_VF_COEF if _cites(experiment, paper)]


@pytest.mark.parametrize("experiment,paper", CITING)
def test_bundles_that_cite_a_paper_use_its_value_loss_scale(experiment, paper):
    extra = DPPO_FILE if experiment == "dppo_hopper" else []
    cfg = validate(compose_config([f"+experiment={experiment}", "run_dir=/tmp/x", *extra]))
    assert cfg.learner.vf_coef == pytest.approx(PAPER_VF_COEF[paper])


def test_the_dppo_bundle_is_among_the_citing_ones():
    assert ("dppo_hopper", "DPPO") in CITING


def test_renamed_keys_are_rewritten_in_overrides_and_saved_configs():
    """updater -> learner: every override form, nothing else touched, one warning per key."""
    from genpol.config.aliases import rename_overrides, rename_saved

    items = ["updater=sac", "updater.lr=1e-3", "+updater.extra=1", "++updater.lr=2", "~updater",
             "--multirun", "updaters=x", "policy.updater=1", "learner.lr=3", "updater"]
    with pytest.warns(FutureWarning, match="'updater' is now 'learner'") as caught:
        renamed = rename_overrides(items)
    assert len(caught) == 1
    assert renamed == ["learner=sac", "learner.lr=1e-3", "+learner.extra=1", "++learner.lr=2", "~learner",
                       "--multirun", "updaters=x", "policy.updater=1", "learner.lr=3", "updater"]  # a bare word
    assert rename_saved({"updater": {"lr": 1}, "env": {}}) == {"learner": {"lr": 1}, "env": {}}


def test_learner_grad_clip_reaches_the_update():
    """learner.grad_clip picks the clip groups the built learner uses: each network, or both as one."""
    from genpol import envs
    from genpol.algorithms import make_algorithm
    from genpol.heads import build_head

    for setting, groups in (("per_network", 2), ("joint", 1)):
        cfg = validate(compose_config(["env=pendulum", "run_dir=/tmp/unused", f"learner.grad_clip={setting}"]))
        env = envs.make("gym:Pendulum-v1", num_envs=1)
        head = build_head(cfg.policy.family, env.obs_dim, env.act_dim, **cfg.policy.head_kwargs())
        updater = make_algorithm(cfg, head, env).updater
        assert len(updater.clip_groups) == groups
        env.close()
    with pytest.raises(ConfigError, match="learner.grad_clip must be per_network or joint"):
        validate(compose_config(["run_dir=/tmp/unused", "learner.grad_clip=both"]))


@pytest.mark.parametrize("override, group, beside", [("policy.family=diffusion", "policy=diffusion",
                                                      ["policy.ft_denoising_steps=20"]),
                                                     ("learner.name=trpo", "learner=trpo", []),
                                                     ("pipeline.name=gorl", "pipeline=gorl", ["policy=gorl"])])
def test_a_name_set_apart_from_its_group_is_refused_naming_the_group(override, group, beside):
    """``policy.family``, ``learner.name`` and ``pipeline.name`` sit in config.yaml beside the fields, but the group
    chose the schema: set alone they failed deep in the build (an AttributeError on a field the schema lacks)."""
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"^{re.escape(override)} does not match the .* group, whose schema is "
                                          rf".*: choose the .* with the group itself \({re.escape(group)}\), not {key}$"):
        validate(compose_config(["env=pendulum", override]))
    assert getattr(validate(compose_config(["env=pendulum", group, *beside])), group.split("=")[0])


@pytest.mark.parametrize("overrides, message", [
    (["learner.lr=inf"], r"^learner.lr must be finite, got inf$"),
    (["learner=sac", "policy=tanh_gaussian", "learner.critic_lr=inf"], r"^learner.critic_lr must be finite, got inf$"),
    # every number: reward_scale=inf stopped at iteration 1 as NonFiniteError, adam_eps=inf trained on, learning nothing
    (["learner.reward_scale=inf"], r"^learner.reward_scale must be finite, got inf$"),
    (["env.render_width=0"], r"^env.render_width must be >= 1, got 0"),  # failed at the video, after training
    (["learner.adam_eps=inf"], r"^learner.adam_eps must be finite, got inf$"),
    (["policy.log_std_init=-inf"], r"^policy.log_std_init must be finite, got -inf$"),
    (["policy=gorl", "pipeline=gorl", "pipeline.stage_weights=[inf,1]"],  # a traceback from int(nan)
     r"^pipeline.stage_weights must be finite, got \[inf, 1.0\]$"),
    (["learner=trpo", "learner.adam_eps=-1e-5"], r"^learner.adam_eps must be > 0"),
    (["pipeline=offline_to_online", "dataset.path=x.hdf5", "pipeline.pretrain_lr=1e-5"],  # the floor stays at 1e-4
     r"^pipeline.pretrain_min_lr must be in \[0, pipeline.pretrain_lr=1e-05\], got 0.0001$"),
    (["pipeline=offline_to_online", "dataset.path=x.hdf5", "pipeline.pretrain_min_lr=-1"],
     r"^pipeline.pretrain_min_lr must be in \[0, "),
    (["pipeline=offline_to_online", "dataset.path=x.hdf5", "pipeline.ema_every=0"], r"^pipeline.ema_every must be >= 1"),
    (["pipeline=offline_to_online", "dataset.path=x.hdf5", "pipeline.pretrain_weight_decay=-5"],
     r"^pipeline.pretrain_weight_decay must be >= 0"),
    # a clip's epsilon is no clip bound: max_norm / (norm + inf) zeroed every gradient, and nothing learned
    (["learner.grad_clip_eps=inf"], r"^learner.grad_clip_eps must be finite, got inf$"),
    # string temperatures, which the finite check does not read: alpha = inf made SAC's actor loss NaN
    (["learner=sac", "policy=tanh_gaussian", "learner.ent_coef=inf"],
     r"^learner.ent_coef must be auto or a finite number >= 0, got 'inf'$"),
    (["+experiment=maxentdp", "learner.ent_coef=inf"],
     r"^learner.ent_coef must be per_env, auto or a finite number > 0, got 'inf'$"),
    (["+experiment=maxentdp", "+learner.per_env_temperatures.pendulum=inf"],
     r"^learner.per_env_temperatures must be positive finite values, got .*.pendulum.: inf"),
    (["+experiment=rlpd", "learner.critic_layer_norm_eps=-1"],  # every Q value NaN
     r"^learner.critic_layer_norm_eps must be > 0, got -1"),
    (["+experiment=gorl", "policy.decoder=ddim", "policy.diffusion_timesteps=0"],  # a ValueError from the head
     r"^policy.diffusion_timesteps must be >= 1, got 0$"),
    # the online phase's values: lr=inf was found only when that phase began, after pretraining
    (["+experiment=consistency_ac", "dataset.path=x.hdf5", "+pipeline.online_learner.lr=inf"],
     r"^pipeline.online_learner.lr must be finite, got inf$"),
    # options nothing reads in the configuration, which trained as if they were not set
    (["+experiment=sac", "policy.critic_hidden_sizes=[512,512,512]"],
     r"^policy.critic_hidden_sizes=\[512, 512, 512\] is not read: learner=sac does not use the head's value critic"),
    (["+experiment=gorl", "learner.clip_range=0.05"],
     r"^learner.clip_range=0.05 is not read: pipeline=gorl sets them per stage: set pipeline.clip_range_first"),
    # a learner's own unread fields (its schema's unread_fields): each was accepted and trained as if not set
    (["learner=sac", "policy=tanh_gaussian", "learner.ent_coef=0.1", "learner.init_temperature=5"],
     r"^learner.init_temperature=5.0 is not read: learner.ent_coef=0.1 fixes the temperature"),
    (["learner=consistency_ac", "policy=tanh_gaussian", "learner.actor_q_reduction=mean"],
     r"^learner.actor_q_reduction='mean' is not read: the Q-loss takes one of two critics drawn at random"),
    (["learner=consistency_ac", "policy=tanh_gaussian", "learner.temperature_lr=1.0"],
     r"^learner.temperature_lr=1.0 is not read: a Q-gradient actor has no entropy term"),
    (["learner=expo", "policy=tanh_gaussian", "learner.offline_ratio=0", "learner.backup_entropy=true"],
     r"^learner.backup_entropy=True is not read: EXPO's TD target has no entropy term"),
    (["learner=meow", "policy=energy_flow", "learner.num_qs=10"],
     r"^learner.num_qs=10 is not read: MEow's flow is its own critic"),
    (["+experiment=maxentdp", "learner.ent_coef=0.1", "learner.default_temperature=0.3"],
     r"^learner.default_temperature=0.3 is not read: learner.ent_coef=0.1 is the temperature"),
    # a learner that cannot train the head at all is named first: the chain-length fix offered before led there
    (["policy=diffusion", "learner=meow"], r"^policy=diffusion with learner=meow: "),
    # fields the on-policy learners read only under another setting trained as if unset
    (["learner.desired_kl=0.05"], r"^learner.desired_kl=0.05 is not read: learner.lr_schedule=constant \(only "),
    (["learner.adaptive_lr_rule=per_epoch"], r"^learner.adaptive_lr_rule='per_epoch' is not read: "),
    (["learner.sequence_length=16"], r"^learner.sequence_length=16 is not read: learner.advantage_estimation=rollout"),
    (["learner.max_grad_norm=null", "learner.grad_clip=joint"],
     r"^learner.grad_clip='joint' is not read: learner.max_grad_norm=null clips no gradient"),
    (["learner.normalize_advantage=false", "learner.advantage_normalization=rollout"],
     r"^learner.advantage_normalization='rollout' is not read: learner.normalize_advantage=false"),
    (["learner=trpo", "learner.normalize_advantage=false", "learner.advantage_std=population"],
     r"^learner.advantage_std='population' is not read: learner.normalize_advantage=false"),
    # failed when the learner was built, after the run's folder was made: exit 1 and a traceback
    (["policy=fpo", "learner.ent_coef=0.01"], r"^learner.ent_coef=0.01 weighs the policy's entropy, but policy=fpo "),
    (["learner=sac", "policy=tanh_gaussian", "pipeline.compile_sampling=true"],
     r"^pipeline.compile_sampling=True is not read: only the on-policy learners' rollouts"),
    (["learner=sac", "policy=energy_flow", "policy.coupling_dropout=0.5"],
     r"^policy.coupling_dropout=0.5 is not read: only learner=meow's loss pass"),
    # a one-step VP chain has no noisy step to ratio: PPO's log-ratio was 0 whatever the weights
    (["policy=vp_diffusion", "policy.sampling_steps=1"],
     r"^policy=vp_diffusion with learner=ppo: policy.sampling_steps=1 leaves the chain no noisy step"),
    # read by the on-policy runner alone: SAC updated on torch_threads whatever it said
    (["learner=sac", "policy=tanh_gaussian", "update_threads=2"],
     r"^update_threads=2 is not read: only an on-policy update runs on its threads; learner=sac "),
    # Hydra's hint for a new key, +learner.per_env_temperatures.hopper, trained at the authors' Hopper value
    (["+experiment=maxentdp", "env=hopper", "+learner.per_env_temperatures.hopper=0.3"],
     r"^learner.per_env_temperatures.hopper is not env.id=Hopper-v5's task Hopper \(keys match case\)"),
    # the fix named for another off-policy learner (learner.critic_*) is refused by MEow in turn
    (["+experiment=meow", "policy.critic_hidden_sizes=[512,512]"],
     r"^policy.critic_hidden_sizes=\[512, 512\] is not read: learner=meow does not use the head's value critic; "
     r"MEow's flow is its own critic"),
])
def test_values_that_trained_wrong_or_failed_late_are_refused_up_front(overrides, message):
    """Each of these passed validation: an infinite rate stopped the run at its first update, a pretraining floor
    above the rate made the cosine climb (1e-5 up to 1e-4), a negative one ascended the loss, ema_every=0 divided
    by zero after pretraining began, and a negative weight decay or TRPO's Adam epsilon failed inside torch."""
    with pytest.raises(ConfigError, match=message):
        validate(compose_config(["env=pendulum", *overrides]))


@pytest.mark.parametrize("overrides, key, saved_value", [
    (["learner=sac", "policy=tanh_gaussian", "learner.ent_coef=0.1"], "learner.init_temperature", 5.0),
    (["learner=expo", "policy=tanh_gaussian", "learner.offline_ratio=0"], "learner.backup_entropy", True),
    (["learner=meow", "policy=energy_flow"], "learner.num_qs", 10),
    ([], "learner.desired_kl", 0.05),
    (["learner=trpo", "learner.normalize_advantage=false"], "learner.advantage_std", "population"),
    (["learner=sac", "policy=tanh_gaussian"], "pipeline.compile_sampling", True),
    (["learner=sac", "policy=energy_flow"], "policy.coupling_dropout", 0.5),
    # runs saved before pipeline=gorl refused them: each stage sets its own clip, so they went unread
    (["policy=gorl", "pipeline=gorl"], "learner.clip_range", 0.1),
    (["policy=gorl", "pipeline=gorl"], "learner.max_grad_norm", None),
    (["learner=sac", "policy=tanh_gaussian"], "update_threads", 2),
])
def test_a_run_saved_with_an_unread_field_moved_resumes_and_groups_as_one(tmp_path, overrides, key, saved_value):
    """Validation now refuses these fields moved from their defaults, so a run saved with one (accepted before)
    resumes with the field left out: the resume check and genpol.report skip the fields the learner's
    ``unread_fields`` names for the run's values (and the other groups' fields check_groups refuses), as they
    skip ``dataset.*`` without a dataset."""
    import yaml

    from genpol.config.base import flatten_keys
    from genpol.report import computed_config
    from genpol.runners.scaffold import check_resume_config, unread_keys

    run_dir = tmp_path / "run"
    cfg = validate(compose_config(["env=pendulum", f"run_dir={run_dir}", *overrides]))
    run_dir.mkdir()
    check_resume_config(run_dir, cfg)  # writes config.yaml
    *group, field = key.split(".")
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    holder = saved[group[0]] if group else saved  # update_threads is a root field
    assert holder[field] != saved_value
    holder[field] = saved_value
    (run_dir / "config.yaml").write_text(yaml.safe_dump(saved))
    (run_dir / "checkpoints" / "step_000000001000").mkdir(parents=True)
    check_resume_config(run_dir, cfg)  # no ConfigError: the run never read the field
    flat = flatten_keys(saved)
    assert key in unread_keys(flat)
    assert computed_config(flat, [key])[key] == getattr(getattr(cfg, group[0]) if group else cfg, field)
    # where the learner reads it (SAC's learned temperature), a changed value is refused as any other
    if key == "learner.init_temperature":
        auto = validate(compose_config(["env=pendulum", f"run_dir={tmp_path / 'auto'}", "learner=sac",
                                        "policy=tanh_gaussian"]))
        (tmp_path / "auto").mkdir()
        check_resume_config(tmp_path / "auto", auto)
        text = (tmp_path / "auto" / "config.yaml").read_text().replace("init_temperature: 1.0", "init_temperature: 5.0")
        (tmp_path / "auto" / "config.yaml").write_text(text)
        (tmp_path / "auto" / "checkpoints" / "step_000000001000").mkdir(parents=True)
        with pytest.raises(ConfigError, match=r"learner.init_temperature: 5.0 -> 1.0"):
            check_resume_config(tmp_path / "auto", auto)


def test_gorl_reads_the_clip_kind_whatever_learner_max_grad_norm_says():
    """GoRL's stages clip with pipeline.max_grad_norm_first/later, so learner.grad_clip(_eps) are read even where
    learner.max_grad_norm is null (runs saved before that was refused): the report kept them apart."""
    from genpol.runners.scaffold import unread_keys

    saved = {"learner.name": "ppo", "learner.max_grad_norm": None, "learner.grad_clip": "joint"}
    assert {"learner.grad_clip", "learner.grad_clip_eps"} <= set(unread_keys({**saved, "pipeline.name": "online"}))
    assert not {"learner.grad_clip", "learner.grad_clip_eps"} & set(unread_keys({**saved, "pipeline.name": "gorl"}))


def test_an_unread_key_covers_its_entries_and_not_a_longer_name():
    """The resume check and genpol.report skip an unread key and the keys under it (a dict field's entries), not
    every key it begins: GoRL's learner.clip_range is unread, learner.clip_range_vf (its value loss's clip) is
    read, and a run saved with another one is refused."""
    from genpol.runners.scaffold import unread_keys
    from genpol.unread import is_unread

    gorl = unread_keys({"learner.name": "ppo", "pipeline.name": "gorl", "dataset.path": None})
    assert is_unread("learner.clip_range", gorl) and not is_unread("learner.clip_range_vf", gorl)
    assert is_unread("dataset.path", gorl) and not is_unread("datasets", ("dataset",))
    maxentdp = unread_keys({"learner.name": "maxentdp", "learner.ent_coef": 0.1, "dataset.path": "d.hdf5"})
    assert is_unread("learner.per_env_temperatures.Hopper", maxentdp)


def test_a_validated_config_refuses_a_misspelt_attribute():
    """``config.learner.lrr = 1e-3`` was set on the plain dataclass and the run trained at the old rate; every
    config (the learner's, the head's, the env's, the run's) now refuses a name it does not declare."""
    config = validate(compose_config(["env=pendulum", "run_dir=/tmp/never-made"]))
    config.learner.lr = 1e-3  # a field: set as before
    assert config.learner.lr == 1e-3
    for node, name, closest in ((config.learner, "lrr", "lr"), (config.policy, "hiden_sizes", "hidden_sizes"),
                                (config.env, "num_env", "num_envs"), (config, "total_step", "total_steps"),
                                (config.pipeline, "eval_episode", "eval_episodes")):
        with pytest.raises(AttributeError, match=rf"^{type(node).__name__} has no field '{name}' to set; did you "
                                                 rf"mean '{closest}'\?"):
            setattr(node, name, 1)
        assert not hasattr(node, name)


def test_a_minibatch_that_does_not_fit_the_rollout_is_warned_about(caplog):
    """learner.minibatch_size=512 on a rollout of 64 x 2 = 128 samples: each epoch is one minibatch of the
    rollout; 64 on 65 samples: each epoch ends with a minibatch of one sample, its advantage unnormalized. Both
    trained as asked, once silently; now said. A minibatch that divides the rollout, or an off-policy learner,
    is not."""
    import logging

    with caplog.at_level(logging.WARNING, logger="genpol.configure"):
        validate(compose_config(["env=pendulum", "learner.minibatch_size=512", "learner.rollout_steps=64",
                                 "env.num_envs=2", "run_dir=/tmp/never-made"]))
        assert [record.getMessage() for record in caplog.records] == [
            "learner.minibatch_size=512 exceeds the rollout of learner.rollout_steps=64 x env.num_envs=2 = 128 "
            "samples: every epoch is one minibatch of the whole rollout (10 gradient steps per update)"]
        caplog.clear()
        validate(compose_config(["env=pendulum", "learner.minibatch_size=64", "learner.rollout_steps=65",
                                 "env.num_envs=1", "run_dir=/tmp/never-made"]))
        assert [record.getMessage() for record in caplog.records] == [
            "learner.minibatch_size=64 does not divide the rollout of learner.rollout_steps=65 x env.num_envs=1 = 65 "
            "samples: every epoch ends with a minibatch of 1 samples, a full step on them; a divisor of 65 avoids it"]
        caplog.clear()
        validate(compose_config(["env=pendulum", "learner.minibatch_size=128", "learner.rollout_steps=64",
                                 "env.num_envs=2", "run_dir=/tmp/never-made"]))
        validate(compose_config(["+experiment=sac", "env=pendulum", "run_dir=/tmp/never-made"]))
        assert not caplog.records


def test_a_one_step_vp_chain_has_no_ratio_to_train_and_serves_the_off_policy_learners():
    """The premise of the refusal above: at sampling_steps=1 the head's log-ratio is 0 after any change of its
    weights; MaxEntDP, which needs no ratio, still takes it."""
    from genpol.heads.vp_diffusion import VPDiffusionHead

    torch.manual_seed(0)
    head = VPDiffusionHead(3, 2, sampling_steps=1, hidden_sizes=[16, 16])
    obs = torch.randn(4, 3)
    _, record = head.sample(obs)
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.add_(0.5)
    assert torch.equal(head.log_ratio(obs, record).log_ratio, torch.zeros(4, 1))
    validate(compose_config(["env=pendulum", "+experiment=maxentdp", "policy.sampling_steps=1",
                             "run_dir=/tmp/never-made"]))

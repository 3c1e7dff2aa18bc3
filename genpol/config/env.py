"""Schema of the ``env`` group and of the offline ``dataset``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from genpol.envs.imports import is_module_name
from genpol.envs.subproc import SPLITTABLE_BACKENDS
from genpol.config.base import ENV_BACKENDS, require
from genpol.fields import FixedFields


@dataclass
class EnvConfig(FixedFields):
    """The simulator and its wrappers."""

    backend: str = "gym"
    """Simulator backend: ``gym`` (gymnasium), ``dmc`` (dm_control suite), ``playground`` (MuJoCo Playground / MJX), ``envpool`` (EnvPool's C++ MuJoCo and dm_control tasks), ``genpol``, or ``custom`` (your own batched simulator, ``genpol.envs.custom``)."""
    id: str = MISSING
    """Task name inside the backend, e.g. ``HalfCheetah-v5``, ``cheetah-run``, ``CheetahRun``, ``MultiGoal``; ``my_pkg:MyReach-v0`` imports your module ``my_pkg`` first (gym), ``my_pkg.sim:make_env`` names your factory (custom)."""
    imports: List[str] = field(default_factory=list)
    """Your modules to import before the env is built, e.g. ``[my_pkg.envs]`` when importing it registers the gymnasium id; env workers and evaluation (recorded in the policy checkpoint) import them too."""
    num_envs: int = 8
    """Parallel environment copies stepped together."""
    workers: int = 1
    """Simulator processes, this one included (gym and dmc backends): above 1 the envs are split into
    that many slices that step in parallel, for machines with spare cores. Results equal those of 1."""
    step_groups: int = 0
    """0: synchronous on-policy collection. G >= 1 (envpool backend): pipelined collection over G fixed
    env groups, one EnvPool each (``genpol/runners/pipelined.py``): 1 overlaps the critic and the
    bookkeeping with the simulation and equals 0 exactly; 2 computes one group's actions while the
    other simulates, a fixed run per seed that differs from 0 under running normalization (see that
    module). Pays only with a core to spare for the policy. Evaluation envs step synchronously."""
    normalize_obs: bool = True
    """Running mean/variance observation normalization (saved with the policy, frozen at evaluation)."""
    normalize_reward: bool = True
    """Scale rewards by the running std of the discounted return (as SB3's VecNormalize)."""
    obs_clip: float = 10.0
    """Clip range of normalized observations."""
    reward_clip: float = 10.0
    """Clip range of scaled rewards."""
    max_episode_steps: Optional[int] = None
    """Override the task's time limit (None keeps the registered one)."""
    render_width: int = 256
    """Width of rendered video frames in pixels."""
    render_height: int = 256
    """Height of rendered video frames in pixels."""
    kwargs: Dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for the backend (``gymnasium.make`` for ``gym``)."""

    @property
    def full_id(self) -> str:
        return f"{self.backend}:{self.id}"

    def __post_init__(self) -> None:
        require(self.backend in ENV_BACKENDS, "env.backend", f"one of {ENV_BACKENDS}", self.backend)
        require(self.num_envs >= 1, "env.num_envs", ">= 1", self.num_envs)
        for key in ("render_width", "render_height"):  # 0 was accepted, and failed at the video, after training
            require(getattr(self, key) >= 1, f"env.{key}", ">= 1", getattr(self, key))
        require(1 <= self.workers <= self.num_envs, "env.workers", f"in [1, num_envs={self.num_envs}]", self.workers)
        require(self.workers == 1 or self.backend != "custom", "env.workers",
                "1 for env.backend=custom (a custom backend steps its envs batched itself; raise env.num_envs)",
                self.workers)
        require(self.workers == 1 or self.backend in SPLITTABLE_BACKENDS, "env.workers",
                f"1 unless env.backend is one of {SPLITTABLE_BACKENDS}", self.workers)
        require(self.step_groups == 0 or (self.step_groups > 0 and self.num_envs % self.step_groups == 0),
                "env.step_groups", f"0 or a divisor of num_envs={self.num_envs}", self.step_groups)
        require(self.step_groups == 0 or (self.backend == "envpool" and self.workers == 1), "env.step_groups",
                "0 unless env.backend=envpool with env.workers=1", self.step_groups)
        bad_imports = [name for name in self.imports if not is_module_name(name)]
        require(not bad_imports, "env.imports", "a list of module names such as [my_pkg.envs]", bad_imports)
        require(self.obs_clip > 0, "env.obs_clip", "> 0", self.obs_clip)
        require(self.reward_clip > 0, "env.reward_clip", "> 0", self.reward_clip)
        if self.max_episode_steps is not None:
            require(self.max_episode_steps >= 1, "env.max_episode_steps", ">= 1 or null", self.max_episode_steps)


@dataclass
class DatasetConfig(FixedFields):
    """The offline dataset of ``pipeline=offline_to_online``."""

    path: Optional[str] = None
    """A D4RL HDF5 file (.hdf5/.h5), or a Minari dataset id such as mujoco/hopper/medium-v0."""
    format: str = "auto"
    """``auto`` (by the path's suffix), ``d4rl`` or ``minari``."""
    minari_root: Optional[str] = None
    """Root of local Minari datasets (default: $MINARI_DATASETS_PATH or ~/.minari/datasets)."""
    max_transitions: int = 4_000_000
    """Largest dataset accepted (transitions); every transition is held in memory, so this bounds it. The
    default covers every D4RL Gym, maze2d and AntMaze file (maze2d-large: 4M); larger ones are refused."""
    observations: str = "min_max"
    """What the networks of ``pipeline=offline_to_online`` see, in both phases: ``min_max``, observations
    scaled to [-1, 1] by the dataset's minimum and maximum (DPPO's convention), or ``raw``, observations as
    the dataset stores them and the env returns them (Diffusion-QL's and Ding & Jin's Consistency-AC). Running
    observation normalization is off in that pipeline either way. ``pipeline=online`` with a dataset (RLPD)
    always uses raw observations."""
    actions: str = "auto"
    """How ``pipeline=offline_to_online`` maps the agent's [-1, 1] actions, in both phases: ``min_max``, onto the
    dataset's action range (DPPO's convention: the policy never leaves the data's range), or ``env``, onto the
    env's own box, the dataset's actions mapped alike (RLPD's, EXPO's and Ding & Jin's Consistency-AC code:
    exploration and the fine-tuned policy reach the whole box). ``auto`` (the default): ``env`` for off-policy
    learners, ``min_max`` for on-policy ones. Runs saved before the field existed used ``min_max``."""
    truncated_rows: str = "keep"
    """The last row of an episode that a time limit (or the file's end) cut, in the off-policy learners'
    offline transitions: ``keep``, a transition bootstrapped from the next observation the dataset holds for
    it (Minari always, D4RL files with ``next_observations``; dropped where there is none), or ``drop``, as D4RL's
    ``qlearning_dataset`` (CORL, RLPD) does. Matters for sparse rewards paid at that step: PointMaze datasets
    end an episode at the goal. Runs saved before the field existed dropped them."""

    def __post_init__(self) -> None:
        require(self.format in ("auto", "d4rl", "minari"), "dataset.format", "auto, d4rl or minari", self.format)
        require(self.observations in ("min_max", "raw"), "dataset.observations", "min_max or raw", self.observations)
        require(self.truncated_rows in ("keep", "drop"), "dataset.truncated_rows", "keep or drop", self.truncated_rows)
        require(self.actions in ("auto", "min_max", "env"), "dataset.actions", "auto, min_max or env", self.actions)
        require(self.max_transitions >= 1, "dataset.max_transitions", ">= 1", self.max_transitions)

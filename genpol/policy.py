"""A trained policy as evaluation and deployment see it: a head, its observation statistics, its env."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np
import torch

from genpol import envs
from genpol.envs import ObservationNormalizer, VectorEnv
from genpol.checkpoint import CheckpointError, load_policy_files, resolve_checkpoint
from genpol.memory import check_device
from genpol.heads import PolicyHead, head_from_spec

log = logging.getLogger(__name__)

POLICY_FORMAT = 1


def make_policy_spec(head: PolicyHead, env: VectorEnv, env_id: str, env_kwargs: dict[str, Any],
                     max_episode_steps: int | None, render_size: tuple[int, int]) -> dict[str, Any]:
    """The JSON part of a checkpoint's ``policy/``: how to rebuild the head and its env stack.

    ``env.imports`` records the user's modules that must be imported before the env can be built
    again (``env.imports`` of the config, and a gymnasium id's registering module): evaluation,
    ``load_policy(...).make_env`` and dataset collection run in fresh processes.
    """
    raw = envs.innermost(env)
    rescale = env.find(envs.ActionRescale)
    agent_bounds = None
    if rescale is not None and rescale._custom_bounds:  # the float32 bounds the env stack maps with, exactly
        agent_bounds = [bound.tolist() for bound in rescale.bounds]
    return {
        "format": POLICY_FORMAT,
        "head": head.spec(),
        "env": {"id": env_id, "kwargs": dict(env_kwargs), "max_episode_steps": max_episode_steps,
                "render_size": list(render_size), "obs_dim": env.obs_dim, "act_dim": env.act_dim,
                "action_chunk": getattr(raw, "action_chunk", 1), "imports": list(env.imports),
                "observation_layout": None if raw.observation_layout is None else
                [[key, list(shape)] for key, shape in raw.observation_layout]},
        "obs_normalization": observation_kind(env),
        "action_bounds": [raw.action_low.tolist(), raw.action_high.tolist()],
        "agent_action_bounds": agent_bounds,
    }


def observation_kind(env: VectorEnv) -> str:
    """``running`` (ObservationNormalizer), ``minmax`` (ObservationScaler) or ``none``."""
    if env.find(ObservationNormalizer) is not None:
        return "running"
    return "minmax" if env.find(envs.ObservationScaler) is not None else "none"


def observation_state(env: VectorEnv) -> dict[str, Any] | None:
    """The observation normalization's state (statistics or fixed bounds), saved with the policy."""
    layer = env.find(ObservationNormalizer) or env.find(envs.ObservationScaler)
    return None if layer is None else layer.own_state()



class TrainedPolicy:
    """A head with the observation statistics it was trained with.

    ``act`` takes observations already normalized by an env from ``make_env``; ``predict`` takes raw
    simulator observations (numpy or torch) and returns actions in the env's own bounds, for use
    outside genpol's env stack.
    """

    def __init__(self, head: PolicyHead, spec: dict[str, Any], obs_statistics: dict[str, Any] | None,
                 source: Path | None = None):
        self.head = head.eval()
        self.spec = spec
        self.obs_statistics = obs_statistics
        self.source = source

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu") -> TrainedPolicy:
        """From a checkpoint directory, or a run directory (its latest checkpoint)."""
        check_device(device)
        checkpoint = resolve_checkpoint(path)
        spec, weights = load_policy_files(checkpoint, map_location=device)
        if spec.get("format") != POLICY_FORMAT:
            raise CheckpointError(f"{checkpoint}/policy/policy.json has format {spec.get('format')}, "
                                  f"this genpol reads format {POLICY_FORMAT}")
        if isinstance(spec.get("obs_normalization"), bool):  # written before "running"/"minmax"/"none"
            spec["obs_normalization"] = "running" if spec["obs_normalization"] else "none"
        # the head's random initialization, replaced by the saved weights at once, draws from torch's global
        # generator: forked, so that loading a policy leaves the caller's later draws as they were
        device = torch.device(device)
        try:  # a head of the user's whose module is not importable here: one line, exit 2 (a traceback, exit 1)
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                head = head_from_spec(spec["head"]).to(device)
        except ValueError as error:
            raise CheckpointError(f"{checkpoint}: its policy head cannot be rebuilt: {error}") from error
        try:
            head.load_state_dict(weights["head"])
        except (KeyError, RuntimeError) as error:
            raise CheckpointError(f"{checkpoint}/policy/weights.pt does not match its head spec: {error}") from None
        return cls(head, spec, weights.get("obs_normalizer"), checkpoint)

    @property
    def env_id(self) -> str:
        return self.spec["env"]["id"]

    @property
    def imports(self) -> list[str]:
        """The user's modules that building this policy's env needs (none in checkpoints made
        before genpol recorded them)."""
        return list(self.spec["env"].get("imports", []))

    def make_env(self, num_envs: int = 1, seed: int | None = None, device: str | torch.device | None = None,
                 video_dir: str | Path | None = None, video_prefix: str = "rollout",
                 render: bool = False) -> VectorEnv:
        """The training env's stack for evaluation: raw rewards, observation statistics frozen. ``device``: where
        its tensors live, by default the policy's (a CPU env stepped with a GPU policy's actions failed on the
        action rescaling's device mismatch)."""
        if device is None:
            parameter = next(self.head.parameters(), None)
            device = parameter.device if parameter is not None else "cpu"
        env_spec = self.spec["env"]
        kind = self.spec["obs_normalization"]
        state = self.obs_statistics
        agent_bounds = self.spec.get("agent_action_bounds")
        try:  # the dims before the wrappers: the saved statistics failed on a changed env with a shape error
            env = envs.make(
                env_spec["id"], num_envs=num_envs, device=device, seed=seed,
                normalize_obs=kind == "running", normalize_reward=False,
                obs_bounds=(state["low"], state["high"]) if kind == "minmax" else None,
                action_bounds=None if agent_bounds is None else tuple(torch.tensor(b) for b in agent_bounds),
                action_chunk=env_spec.get("action_chunk", 1),
                render=render, render_size=tuple(env_spec["render_size"]), video_dir=video_dir,
                video_prefix=video_prefix, max_episode_steps=env_spec["max_episode_steps"],
                env_kwargs=env_spec["kwargs"], imports=self.imports, dims=(env_spec["obs_dim"], env_spec["act_dim"]),
            )
        except envs.EnvDimsError as error:
            raise CheckpointError(f"{error}: the policy was trained with {env_spec['obs_dim']}/"
                                  f"{env_spec['act_dim']} ({self.source})") from None
        normalizer = env.find(ObservationNormalizer)
        if normalizer is not None:
            normalizer.load_own_state(state)
            normalizer.frozen = True
        recorder = env.find(envs.VideoRecorder)
        if recorder is not None:
            recorder.max_episodes = 1
        return env

    @property
    def obs_dim(self) -> int:
        return int(self.spec["env"]["obs_dim"])

    def _flatten_dict(self, raw_obs: Mapping[str, Any]) -> np.ndarray:
        """A dict observation (a goal env's, dm_control's) -> ``[..., D]`` in the key order training flattened it
        in (``policy.json``'s ``observation_layout``). gymnasium's FlattenObservation sorts the keys instead
        (achieved_goal first): a vector of the right size in another order, which gave wrong actions silently."""
        layout = self.spec["env"].get("observation_layout")
        if layout is None:
            raise TypeError(f"TrainedPolicy.predict: got a dict observation (keys {sorted(raw_obs)}), but "
                            f"{self.env_id}'s observations were flat arrays in training (or the policy was saved "
                            "before genpol recorded dict layouts, 2026-12-07): pass the [D] array the env stack saw")
        keys = [key for key, _ in layout]
        if set(raw_obs) != set(keys):
            raise ValueError(f"TrainedPolicy.predict: the dict observation has keys {sorted(raw_obs)}; "
                             f"{self.env_id}'s are {keys}")
        parts, leading = [], None
        for key, shape in layout:
            value = np.asarray(raw_obs[key], dtype=np.float32)
            cut = value.ndim - len(shape)
            fits = cut >= 0 and list(value.shape[cut:]) == list(shape)
            if not fits or (leading is not None and value.shape[:cut] != leading):
                raise ValueError(f"TrainedPolicy.predict: observation['{key}'] has shape {value.shape}; expected "
                                 f"{tuple(shape)}, after the same leading (batch) shape as the other keys"
                                 + (f" {leading}" if leading is not None else ""))
            leading = value.shape[:cut]
            parts.append(value.reshape(*leading, -1))
        return np.concatenate(parts, axis=-1)

    def _check_obs_shape(self, shape: tuple[int, ...], method: str, expected: str) -> None:
        if len(shape) == 0 or shape[-1] != self.obs_dim:
            raise ValueError(f"TrainedPolicy.{method}: observations must be {expected} with D = {self.obs_dim} "
                             f"({self.env_id}), got shape {tuple(shape)}")

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """Normalized ``obs [B, D]`` -> action in ``[-1, 1]``-space ``[B, A]``. A float tensor of another
        dtype or device is moved to the head's; anything else is refused, naming what ``act`` takes."""
        if not isinstance(obs, torch.Tensor):
            raise TypeError(f"TrainedPolicy.act takes a torch tensor of normalized observations "
                            f"[B, {self.obs_dim}] (from an env of make_env), got {type(obs).__name__}; predict takes "
                            "raw numpy observations")
        self._check_obs_shape(tuple(obs.shape), "act", "[B, D]")
        if obs.ndim != 2 or not obs.is_floating_point():
            raise ValueError(f"TrainedPolicy.act: observations must be a float tensor [B, {self.obs_dim}], got "
                             f"{obs.dtype} of shape {tuple(obs.shape)}")
        parameter = next(self.head.parameters(), None)  # None: a head without weights (a scripted one)
        if parameter is not None:
            obs = obs.to(parameter.device, parameter.dtype)
        return self.head.act(obs, deterministic=deterministic)

    @torch.no_grad()
    def predict(self, raw_obs: np.ndarray | torch.Tensor, deterministic: bool = True) -> np.ndarray:
        """Raw simulator ``obs [..., D]`` (one ``[D]``, a batch ``[B, D]``, or any leading shape) ->
        actions in the env's bounds ``[..., A]``, the same leading shape. A policy that acts in chunks of
        C actions (``action_chunk`` > 1, e.g. DPPO's ``act_steps``) returns ``[..., C, A]``: step the env
        with each in turn before the next ``predict``, as its evaluation does. A simulator's dict observation (a
        goal env's, dm_control's; each entry ``[..., *shape]``) is flattened in the order training used."""
        parameter = next(self.head.parameters(), None)  # None: a head without weights (a scripted one)
        device = parameter.device if parameter is not None else torch.device("cpu")
        if isinstance(raw_obs, tuple) and len(raw_obs) == 2 and isinstance(raw_obs[1], dict):
            raise TypeError("TrainedPolicy.predict takes an observation, got gymnasium's (observation, info) pair: "
                            "pass obs from `obs, info = env.reset()`")
        if isinstance(raw_obs, Mapping):
            raw_obs = self._flatten_dict(raw_obs)
        if isinstance(raw_obs, np.ndarray) and raw_obs.dtype.kind in "fiu":
            # a float32 copy in native byte order: torch refused a big-endian array (HDF5, MATLAB) and warned on a
            # read-only one (a ROS message's buffer)
            raw_obs = np.array(raw_obs, dtype=np.float32)
        try:
            obs = torch.as_tensor(raw_obs, dtype=torch.float32).to(device)
        except (TypeError, ValueError, RuntimeError) as error:  # a dict, a ragged list: torch's message names neither
            raise TypeError(f"TrainedPolicy.predict: observations must be an array [D] or [..., D] with D = "
                            f"{self.obs_dim} ({self.env_id}), got {type(raw_obs).__name__} ({error})") from None
        self._check_obs_shape(tuple(obs.shape), "predict", "[D] or [..., D]")
        if not bool(torch.isfinite(obs).all()):  # the network would return NaN actions, silently
            raise ValueError(f"TrainedPolicy.predict: observations hold NaN or inf (first at flat index "
                             f"{int((~torch.isfinite(obs)).flatten().nonzero()[0])})")
        leading = obs.shape[:-1]
        if obs.numel() == 0:  # a reshape of 0 rows failed inside the head with torch's message
            raise ValueError(f"TrainedPolicy.predict: an empty batch of observations, shape {tuple(obs.shape)}")
        obs = obs.reshape(-1, obs.shape[-1])
        kind, state = self.spec["obs_normalization"], self.obs_statistics
        if kind == "running":
            stats = state["stats"]
            scaled = (obs.double() - stats["mean"].to(device)) / torch.sqrt(stats["var"].to(device) + state["epsilon"])
            obs = scaled.clamp(-state["clip"], state["clip"]).float()
        elif kind == "minmax":
            low, high = state["low"].to(device), state["high"].to(device)
            obs = 2 * (obs - low) / (high - low + 1e-6) - 1
        chunk = int(self.spec["env"].get("action_chunk", 1))
        action = self.act(obs, deterministic)
        action = action.reshape(action.shape[0], chunk, -1)  # [B, C, A]
        # the env's bounds per action [A], or per action of the chunk [C * A] (a backend that chunks itself)
        env_low, env_high = (torch.tensor(b, dtype=torch.float32, device=device).reshape(-1, action.shape[-1])
                             for b in self.spec["action_bounds"])
        agent = self.spec.get("agent_action_bounds")  # a dataset's range, per action of the chunk
        if agent is None:
            low, high, clip_to = env_low, env_high, None
        else:
            low, high = (torch.tensor(b, dtype=torch.float32, device=device).reshape(chunk, -1) for b in agent)
            clip_to = (env_low, env_high)
        center, half_range, finite = envs.action_affine(low, high)
        action = envs.rescale_actions(action, center, half_range, None if bool(finite.all()) else finite, clip_to)
        shape = (*leading, action.shape[-1]) if chunk == 1 else (*leading, chunk, action.shape[-1])
        return action.reshape(shape).cpu().numpy()


class EpisodeResults(NamedTuple):
    """One entry per env: ``returns [N]``, ``lengths [N]``, and ``success [N]`` (bool: the env flagged
    success at some step of the episode) or None for an env that does not define success."""

    returns: np.ndarray
    lengths: np.ndarray
    success: np.ndarray | None


# Evaluation runs every env's first episode to its end. An env that declares no time limit
# (``max_episode_steps`` None: a gymnasium env registered without one, a custom simulator) may never end
# one, and evaluation looped forever (a SIGTERM, handled at iteration ends, did not stop it either).
STEPS_WITHOUT_TIME_LIMIT = 10_000


@torch.no_grad()
def evaluate_episodes(env: VectorEnv, act: Callable[[torch.Tensor], torch.Tensor], seed: int,
                      max_steps: int | None = None) -> EpisodeResults:
    """One episode per env (env i reset with ``seed + i``); see ``EpisodeResults``.

    Every env runs exactly its first episode, so short episodes are not over-represented (the bias
    of "stop after the first K episodes to finish"). Rewards are summed as the env returns them.
    Episodes still running after ``max_steps`` calls of ``env.step`` (default: ``STEPS_WITHOUT_TIME_LIMIT``,
    or the env's own ``max_episode_steps`` where that is larger) are cut there, with a warning: their return
    so far counts, as a time limit's would, and env 0's video (if recorded) ends there. ``act`` draws from
    torch's generator seeded with ``seed`` in a fork, which leaves the caller's stream as it was.
    """
    # a stochastic policy's draws come from torch's generator, forked and seeded here: an evaluation
    # repeats (the run's, genpol-evaluate's), and training, which draws from the same generator, is untouched
    cuda = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=cuda):
        # not torch.manual_seed: before CUDA starts it queues a seed for CUDA's start, outside this fork
        torch.default_generator.manual_seed(seed)
        for device in cuda:
            torch.cuda.default_generators[device].manual_seed(seed)
        return _first_episodes(env, act, seed, max_steps)


def _first_episodes(env: VectorEnv, act: Callable[[torch.Tensor], torch.Tensor], seed: int,
                    max_steps: int | None) -> EpisodeResults:
    declared = getattr(env, "max_episode_steps", None)
    if max_steps is None:
        max_steps = max(declared or 0, STEPS_WITHOUT_TIME_LIMIT)
    obs = env.reset(seed=seed)
    active = torch.ones(env.num_envs, dtype=torch.bool, device=env.device)
    returns = torch.zeros(env.num_envs, dtype=torch.float64, device=env.device)
    lengths = torch.zeros(env.num_envs, dtype=torch.int64, device=env.device)
    succeeded = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    reports_success = getattr(env, "reports_success", False)
    for _ in range(max_steps):
        obs, reward, terminated, truncated, info = env.step(act(obs))
        returns += torch.where(active, reward.double(), 0.0)  # not reward * active: NaN x 0 is NaN
        executed = info.get("env_steps")  # action chunks: the env steps each env took in this call
        lengths += active.long() * (1 if executed is None else executed.to(lengths.device))
        if reports_success:
            succeeded |= info["success"] & active
        active &= ~(terminated | truncated)
        if not active.any():
            break
    else:
        if active.any():
            recorder = env.find(envs.VideoRecorder) if hasattr(env, "find") else None  # duck-typed envs lack it
            if recorder is not None and bool(active[0]):  # env 0's video: published up to the cut, not dropped
                recorder.flush()
            why = ("the env declares no time limit (max_episode_steps is None); set env.max_episode_steps "
                   "to give it one" if declared is None else f"the env declares a time limit of {declared}")
            log.warning("%s: %d of %d evaluation episodes had not ended after %d steps and were cut there: %s",
                        getattr(env, "env_id", "the env"), int(active.sum()), env.num_envs, max_steps, why)
    return EpisodeResults(returns.cpu().numpy(), lengths.cpu().numpy(),
                          succeeded.cpu().numpy() if reports_success else None)


def run_episodes(env: VectorEnv, act: Callable[[torch.Tensor], torch.Tensor],
                 seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(returns [N], lengths [N])`` of ``evaluate_episodes``."""
    results = evaluate_episodes(env, act, seed)
    return results.returns, results.lengths

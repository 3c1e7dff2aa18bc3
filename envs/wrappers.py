"""Wrappers on the torch vector-env protocol.

These are written for ``genpol.envs.core.VectorEnv`` rather than taken from ``gymnasium.wrappers.vector``
because they must work on every backend, including GPU simulators whose tensors never visit numpy;
gymnasium's vector wrappers operate on numpy arrays.

Usual order, innermost first: backend -> ActionRescale -> EpisodeStats -> VideoRecorder ->
ObservationNormalizer -> RewardScaler (``genpol.envs.make`` builds it). Episode statistics therefore see the
raw rewards, and the learner sees normalized observations and scaled rewards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from .core import StepResult, VectorEnv, VectorEnvWrapper, innermost
from .video import Mp4Stream


class RunningMeanStd:
    """Running mean and variance of a stream of batches (Chan et al.'s parallel update).

    ``count`` starts at ``1e-4`` as in stable-baselines3 so that the first batch dominates.
    """

    def __init__(self, shape: tuple[int, ...], device: torch.device):
        self.mean = torch.zeros(shape, dtype=torch.float64, device=device)
        self.var = torch.ones(shape, dtype=torch.float64, device=device)
        self.count = 1e-4

    def update(self, batch: torch.Tensor) -> None:
        """Fold in ``batch`` of shape ``[B, *shape]``."""
        batch_var, batch_mean = torch.var_mean(batch.to(torch.float64), dim=0, correction=0)
        self.fold(batch_mean, batch_var, batch.shape[0])

    def fold(self, batch_mean: torch.Tensor, batch_var: torch.Tensor, batch_count: int) -> None:
        """Fold in a batch given by its mean, (biased) variance and size (also the moments of a
        batch spread over several processes)."""
        total = self.count + batch_count
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * (batch_count / total)
        # M2_total / total with M2 = var * count for each part, plus the between-part term.
        self.var = (self.var * (self.count / total) + batch_var * (batch_count / total)
                    + delta.square() * (self.count * batch_count / total**2))
        self.count = total

    def state_dict(self) -> dict[str, Any]:
        return {"mean": self.mean.clone(), "var": self.var.clone(), "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["mean"].shape != self.mean.shape:
            raise ValueError(
                f"normalizer statistics have shape {list(state['mean'].shape)}, "
                f"expected {list(self.mean.shape)}"
            )
        self.mean = state["mean"].to(self.mean)
        self.var = state["var"].to(self.var)
        self.count = float(state["count"])


class ActionRescale(VectorEnvWrapper):
    """The agent acts in ``[-1, 1]^A`` (clipped there); the env receives ``center + a * half_range`` (float32 may put
    it an ulp past a bound, as gymnasium's RescaleAction does).

    Dimensions with an infinite bound are passed through unscaled (and unclipped). ``bounds``
    replaces ``(low, high)``, e.g. by an offline dataset's action range; the result is still
    clipped to the env's own bounds.
    """

    def __init__(self, env: VectorEnv, bounds: tuple[torch.Tensor, torch.Tensor] | None = None):
        super().__init__(env)
        low, high = env.action_low, env.action_high
        self._env_low, self._env_high = low, high
        self._custom_bounds = bounds is not None
        if bounds is not None:
            low, high = (torch.as_tensor(b, dtype=torch.float32, device=env.device) for b in bounds)
            if low.shape != env.action_low.shape:
                raise ValueError(f"{env.env_id}: action bounds of shape {list(low.shape)} do not fit actions "
                                 f"of shape {list(env.action_low.shape)}")
            if bool((low > high).any()):  # the map would mirror that dimension's actions, silently
                bad = int((low > high).nonzero()[0])
                raise ValueError(f"{env.env_id}: action bounds must have low <= high, got {float(low[bad])} > "
                                 f"{float(high[bad])} in dimension {bad}")
        self.bounds = (low, high)  # as given: what a saved policy records to map its actions the same way
        self._center, self._half_range, self._finite = action_affine(low, high)
        self._all_finite = bool(self._finite.all())
        self.action_low = torch.where(self._finite, -torch.ones_like(low), low)
        self.action_high = torch.where(self._finite, torch.ones_like(high), high)

    def transform_actions(self, actions: torch.Tensor) -> torch.Tensor:
        return rescale_actions(actions, self._center, self._half_range, None if self._all_finite else self._finite,
                               (self._env_low, self._env_high) if self._custom_bounds else None)


def action_affine(low: torch.Tensor, high: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(center, half_range, finite)`` of action bounds ``[A]``: ``ActionRescale``'s map, computed once there
    and by ``TrainedPolicy.predict`` from the same float32 bounds, so both round alike."""
    finite = torch.isfinite(low) & torch.isfinite(high)
    return (torch.where(finite, (low + high) / 2, torch.zeros_like(low)),
            torch.where(finite, (high - low) / 2, torch.ones_like(low)), finite)


def rescale_actions(actions: torch.Tensor, center: torch.Tensor, half_range: torch.Tensor,
                    finite: torch.Tensor | None, clip_to: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """Agent actions ``[..., A]`` in [-1, 1] -> ``center + a * half_range``; dimensions not ``finite`` (None: all
    are) pass unscaled; then clipped to ``clip_to`` (the env's own bounds under a dataset's), if given."""
    scaled = torch.addcmul(center, actions.clamp(-1.0, 1.0), half_range)
    if finite is not None:
        scaled = torch.where(finite, scaled, actions)
    if clip_to is not None:
        scaled = torch.maximum(torch.minimum(scaled, clip_to[1]), clip_to[0])
    return scaled


class EpisodeStats(VectorEnvWrapper):
    """Adds ``episode_return`` and ``episode_length`` ``[K]`` to ``info`` for episodes that just ended,
    and ``episode_success`` ``[K]`` (success at any step) where the env ``reports_success``.

    A backend that computes them itself (inside a jitted step, ``provides_episode_stats``) is passed
    through unchanged.
    """

    def __init__(self, env: VectorEnv):
        super().__init__(env)
        self._returns = torch.zeros(self.num_envs, dtype=torch.float64, device=self.device)
        self._lengths = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._no_episodes = torch.zeros(0, device=self.device)
        self._no_lengths = torch.zeros(0, dtype=torch.int64, device=self.device)
        self._succeeded = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self._no_successes = torch.zeros(0, dtype=torch.bool, device=self.device)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        self._returns.zero_()
        self._lengths.zero_()
        self._succeeded.zero_()
        return self.env.reset(seed)

    def transform_step(self, result: StepResult, envs: slice) -> StepResult:
        if self.provides_episode_stats:
            return result
        obs, reward, terminated, truncated, info = result
        returns, lengths, succeeded = self._returns[envs], self._lengths[envs], self._succeeded[envs]  # views
        returns += reward
        lengths += info.get("env_steps", 1)  # chunked envs execute several env steps per step
        ended = terminated | truncated
        if self.reports_success:
            succeeded |= info["success"]
        if ended.any():
            info["episode_return"] = returns[ended].float()
            info["episode_length"] = lengths[ended]
            returns.masked_fill_(ended, 0.0)
            lengths.masked_fill_(ended, 0)
            if self.reports_success:
                info["episode_success"] = succeeded[ended]
                succeeded.masked_fill_(ended, False)
        else:
            info["episode_return"] = self._no_episodes
            info["episode_length"] = self._no_lengths
            if self.reports_success:
                info["episode_success"] = self._no_successes
        return obs, reward, terminated, truncated, info

    def own_state(self) -> dict[str, Any]:
        return {"returns": self._returns.clone(), "lengths": self._lengths.clone(),
                "succeeded": self._succeeded.clone()}

    def load_own_state(self, state: dict[str, Any]) -> None:
        self._returns.copy_(state["returns"])
        self._lengths.copy_(state["lengths"])
        if "succeeded" in state:  # checkpoints from before success tracking have none
            self._succeeded.copy_(state["succeeded"])

    def episodes_restarted(self) -> None:
        """The backend reset every env on an inexact restore: the saved episodes' sums do not carry over."""
        self._returns.zero_()
        self._lengths.zero_()
        self._succeeded.zero_()


class ObservationNormalizer(VectorEnvWrapper):
    """``clip((obs - mean) / sqrt(var + eps), -clip, clip)`` with running statistics.

    The statistics update on every observation while ``frozen`` is False (training) and stay fixed
    when it is True (evaluation, or while a learner needs stored observations to stay comparable).
    ``info["final_obs"]`` is normalized with the same statistics as the step's observations.
    """

    def __init__(self, env: VectorEnv, clip: float = 10.0, epsilon: float = 1e-8, frozen: bool = False):
        super().__init__(env)
        self.stats = RunningMeanStd((self.obs_dim,), self.device)
        self.clip = clip
        self.epsilon = epsilon
        self.frozen = frozen

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs [..., D]`` -> normalized float32 ``[..., D]`` with the current statistics."""
        scaled = (obs - self.stats.mean) * torch.rsqrt(self.stats.var + self.epsilon)
        return scaled.clamp_(-self.clip, self.clip).to(torch.float32)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        obs = self.env.reset(seed)
        if not self.frozen:
            self.stats.update(obs)
        return self.normalize(obs)

    def transform_step(self, result: StepResult, envs: slice) -> StepResult:
        # a group's step (envs.core) folds in that group's observations: once every group has stepped,
        # Chan's update gives the whole batch's statistics (up to rounding), but a group normalizes with
        # statistics that hold its own and earlier groups' step, not later ones': grouped runs differ
        obs, reward, terminated, truncated, info = result
        if not self.frozen:
            self.stats.update(obs)
        raw_final_obs = info["final_obs"]
        normalized = self.normalize(obs)
        info["final_obs"] = normalized if raw_final_obs is obs else self.normalize(raw_final_obs)
        return normalized, reward, terminated, truncated, info

    def own_state(self) -> dict[str, Any]:
        return {"stats": self.stats.state_dict(), "clip": self.clip, "epsilon": self.epsilon}

    def load_own_state(self, state: dict[str, Any]) -> None:
        self.stats.load_state_dict(state["stats"])
        self.clip = float(state["clip"])
        self.epsilon = float(state["epsilon"])


class ObservationScaler(VectorEnvWrapper):
    """Fixed per-dimension affine map to [-1, 1]: ``2 (obs - low) / (high - low + 1e-6) - 1``.

    For policies pretrained on an offline dataset, whose observations were scaled with the
    dataset's min and max (DPPO's normalization); ``info["final_obs"]`` is scaled the same way.
    """

    def __init__(self, env: VectorEnv, low: torch.Tensor, high: torch.Tensor):
        super().__init__(env)
        self.low = torch.as_tensor(low, dtype=torch.float32, device=self.device)
        self.high = torch.as_tensor(high, dtype=torch.float32, device=self.device)
        if self.low.shape != (self.obs_dim,) or self.high.shape != (self.obs_dim,):
            raise ValueError(f"{self.env_id}: observation bounds of shape {list(self.low.shape)} do not fit "
                             f"observations of size {self.obs_dim}")

    def scale(self, obs: torch.Tensor) -> torch.Tensor:
        return 2 * (obs - self.low) / (self.high - self.low + 1e-6) - 1

    def reset(self, seed: int | None = None) -> torch.Tensor:
        return self.scale(self.env.reset(seed))

    def transform_step(self, result: StepResult, envs: slice) -> StepResult:
        obs, reward, terminated, truncated, info = result
        scaled = self.scale(obs)
        info["final_obs"] = scaled if info["final_obs"] is obs else self.scale(info["final_obs"])
        return scaled, reward, terminated, truncated, info

    def own_state(self) -> dict[str, Any]:
        return {"low": self.low.clone(), "high": self.high.clone()}

    def load_own_state(self, state: dict[str, Any]) -> None:
        self.low = state["low"].to(self.low)
        self.high = state["high"].to(self.high)


class RewardScaler(VectorEnvWrapper):
    """Divides rewards by the running std of the discounted return, then clips (as SB3's VecNormalize).

    The discounted return ``R <- gamma * R + r`` restarts at every episode end.
    """

    def __init__(self, env: VectorEnv, gamma: float = 0.99, clip: float = 10.0, epsilon: float = 1e-8):
        super().__init__(env)
        self.gamma = gamma
        self.clip = clip
        self.epsilon = epsilon
        self.frozen = False
        self.stats = RunningMeanStd((), self.device)
        self._discounted = torch.zeros(self.num_envs, dtype=torch.float64, device=self.device)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        self._discounted.zero_()
        return self.env.reset(seed)

    def transform_step(self, result: StepResult, envs: slice) -> StepResult:
        obs, reward, terminated, truncated, info = result
        discounted = self._discounted[envs]  # a view: a group updates its own envs' returns
        discounted.mul_(self.gamma).add_(reward)
        if not self.frozen:
            self.stats.update(discounted)
        discounted.masked_fill_(terminated | truncated, 0.0)
        scaled = (reward * torch.rsqrt(self.stats.var + self.epsilon)).clamp_(-self.clip, self.clip)
        return obs, scaled.to(torch.float32), terminated, truncated, info

    def own_state(self) -> dict[str, Any]:
        return {"stats": self.stats.state_dict(), "discounted": self._discounted.clone()}

    def load_own_state(self, state: dict[str, Any]) -> None:
        self.stats.load_state_dict(state["stats"])
        self._discounted.copy_(state["discounted"])

    def episodes_restarted(self) -> None:
        self._discounted.zero_()  # the running return starts with the new episodes, as at reset


class VideoRecorder(VectorEnvWrapper):
    """Records env 0: one mp4 per episode of env 0, streamed to ffmpeg as it is rendered
    (``genpol.envs.video.Mp4Stream``: memory of one frame, the file published when the episode ends).

    Not gymnasium's ``RecordVideo``: it pulls moviepy, which downgrades pillow, and keeps every frame
    of an episode in memory. Frames come from ``render()``; the env must be made with rendering on. An
    episode of T steps gets T + 1 frames, as gymnasium's: the reset state, then the state after each step,
    the last one from ``info["final_frame"]`` (``render()`` after that step shows the next episode's reset
    state); an env that gives no final frame (a custom one) films T. An episode cut short by ``reset`` or
    ``close``, or of fewer than two frames, leaves no file.

    Args:
        directory: where ``<prefix>-episode<k>.mp4`` files go, k counting env 0's recorded episodes from 0
            (created if missing).
        fps: frames per second of the file; None: real time, the env's ``render_fps`` (control steps per second)
            divided by the action chunk of its backend (a frame per step, and a step of a chunked env runs
            ``action_chunk`` control steps).
        max_episodes: stop recording after this many episodes of env 0 have ended, each with its file or,
            under two frames, without (None: no limit).
    """

    def __init__(
        self, env: VectorEnv, directory: str | Path, prefix: str = "rollout", fps: float | None = None,
        max_episodes: int | None = None,
    ):
        super().__init__(env)
        self.directory = Path(directory)
        self.prefix = prefix
        # a fixed 30 played Hopper-v5 (125 control steps a second) at 0.24x and dm_control's cheetah (100) at 0.3x
        self.fps = self.render_fps / getattr(innermost(env), "action_chunk", 1) if fps is None else fps
        self.max_episodes = max_episodes
        self.paths: list[Path] = []
        # env 0's episodes recorded and ended, a file or not: counting the files, an evaluated episode too short
        # for one left the count at 0, and the next, unevaluated episode was filmed under the evaluated one's name
        self.episodes_ended = 0
        self._stream: Mp4Stream | None = None  # env 0's episode being written

    def _capture(self) -> None:
        if self.max_episodes is not None and self.episodes_ended >= self.max_episodes:
            return
        frame = self.env.render()
        if frame is None:
            # "needs an env made with render=True" misled where the factory had been given it (an env of the user's
            # that does not implement render(): VectorEnv's returns None)
            raise RuntimeError(f"{self.env_id}: render() returned no frame: a video needs an env made with "
                               "render=True whose render() returns env 0's RGB frame [H, W, 3] (uint8); "
                               "pipeline.video=false skips videos")
        if self._stream is None:
            path = self.directory / f"{self.prefix}-episode{self.episodes_ended}.mp4"
            self._stream = Mp4Stream(path, fps=self.fps)
        self._append(frame)

    def _append(self, frame: np.ndarray) -> None:
        """Append ``frame [H, W, 3]`` to the open stream; a failure drops the episode's file."""
        assert self._stream is not None
        try:
            self._stream.append(frame)
        except BaseException:
            self._discard()
            raise

    def _discard(self) -> None:
        if self._stream is not None:
            self._stream.abort()
            self._stream = None

    def reset(self, seed: int | None = None) -> torch.Tensor:
        obs = self.env.reset(seed)
        self._discard()
        self._capture()
        return obs

    def step(self, actions: torch.Tensor) -> StepResult:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        if bool(terminated[0] | truncated[0]):
            # the backend auto-reset env 0 inside the step: its last state (a Hopper's fall, a maze's goal) is
            # only in the frame it drew before the reset (no stream: this episode is not filmed, max_episodes)
            final_frame = info.get("final_frame")
            if final_frame is not None and self._stream is not None:
                self._append(final_frame)
            self.flush()
        self._capture()
        return obs, reward, terminated, truncated, info

    def flush(self) -> Path | None:
        """End env 0's current episode: publish its mp4 (if it has two frames or more) and return its path."""
        stream, self._stream = self._stream, None
        if stream is not None:
            self.episodes_ended += 1
        if stream is None or stream.frames < 2:
            if stream is not None:
                stream.abort()
            return None
        path = stream.finish()
        self.paths.append(path)
        return path

    def close(self) -> None:
        self._discard()
        super().close()

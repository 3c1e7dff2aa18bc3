"""Periodic and final evaluation of the policy (deterministic by default), with a video of the final one."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from genpol.envs import VectorEnv, VideoRecorder
from genpol.callbacks.base import Callback, failure_hint, log
from genpol.policy import EpisodeResults, evaluate_episodes

EVAL_SEED = 10_000  # reset seeds 10000, 10001, ...: disjoint from training seeds, as in ANCHORS.md


class Evaluation(Callback):
    """Runs ``episodes`` episodes every ``every`` iterations (0: never) and at the end.

    Args:
        make_env: ``(num_envs, video_dir or None, video_prefix) -> VectorEnv`` giving an env with the
            training env's observation statistics, frozen, and raw rewards.
        episodes: episodes per evaluation (one per env).
        every: iterations between evaluations; 0 evaluates only at the end.
        video_dir: where the final evaluation writes ``final-episode0.mp4`` (None: no video).
        normalized_score: ``mean return -> score`` (e.g. D4RL's), logged as ``eval/normalized_score``.
        deterministic: act with ``head.act(obs, deterministic=...)`` (``pipeline.eval_deterministic``).

    Where the env defines success (``reports_success``), the fraction of episodes that succeeded is
    logged as ``eval/success_rate`` and kept as ``final_success_rate``.
    """

    def __init__(self, make_env: Callable[[int, Path | None, str], VectorEnv], episodes: int,
                 every: int = 0, video_dir: str | Path | None = None,
                 normalized_score: Callable[[float], float] | None = None, deterministic: bool = True):
        self.make_env = make_env
        self.deterministic = deterministic
        self.episodes = episodes
        self.every = every
        self.video_dir = None if video_dir is None else Path(video_dir)
        self.history: list[tuple[int, float]] = []  # (global_step, mean return)
        self.final_return: float | None = None
        self.final_score: float | None = None
        self.final_success_rate: float | None = None  # for envs that define success
        self.normalized_score = normalized_score
        self.video_path: Path | None = None
        self.video_error: str | None = None  # why the final video is missing, if it failed
        # (global_step, results) of the latest periodic evaluation: the final one at the same step, without a
        # video to record, is the same episodes of the same weights from the same seed, and is not run again
        self._latest: tuple[int, EpisodeResults] | None = None

    def evaluate(self, runner: Any, video_dir: Path | None = None) -> tuple[EpisodeResults, Path | None]:
        env = self.make_env(self.episodes, video_dir, "final")
        try:
            # a stochastic evaluation draws from a generator of its own (evaluate_episodes forks torch's and
            # seeds it): from the one training draws from, it made the weights depend on eval_every
            results = evaluate_episodes(env, lambda obs: runner.head.act(obs, deterministic=self.deterministic),
                                        EVAL_SEED)
            recorder = env.find(VideoRecorder)
            video = recorder.paths[0] if recorder is not None and recorder.paths else None
        finally:
            env.close()
        return results, video

    def on_iteration_end(self, runner: Any, metrics: dict[str, float]) -> None:
        if self.every and runner.iteration % self.every == 0:
            results, _ = self.evaluate(runner)
            self._latest = (runner.global_step, results)
            returns = results.returns
            self.history.append((runner.global_step, float(returns.mean())))
            metrics["eval/episodic_return"] = float(returns.mean())
            if results.success is not None:
                metrics["eval/success_rate"] = float(results.success.mean())
            if self.normalized_score is not None:
                metrics["eval/normalized_score"] = float(self.normalized_score(float(returns.mean())))

    def on_train_end(self, runner: Any) -> None:
        if self.video_dir is None and self._latest is not None and self._latest[0] == runner.global_step:
            self._finish(runner, self._latest[1])
            return
        try:
            results, self.video_path = self.evaluate(runner, self.video_dir)
        except Exception as error:  # noqa: BLE001 - rendering is optional: keep the return without it
            if self.video_dir is None:
                raise
            self.video_error = failure_hint(error)
            log.warning("the final evaluation's video failed, evaluating without it: %s", self.video_error)
            results, self.video_path = self.evaluate(runner, None)
        self._finish(runner, results)

    def _finish(self, runner: Any, results: EpisodeResults) -> None:
        self.final_return = float(results.returns.mean())
        self.final_success_rate = None if results.success is None else float(results.success.mean())
        if self.normalized_score is not None:
            self.final_score = float(self.normalized_score(self.final_return))
        if not self.history or self.history[-1][0] != runner.global_step:
            self.history.append((runner.global_step, self.final_return))

    def state_dict(self) -> dict[str, Any]:
        return {"history": [list(item) for item in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [(int(step), float(value)) for step, value in state["history"]]

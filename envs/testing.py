"""The vector-env protocol as a conformance suite you can run on your own backend.

    from .testing import check_vector_env

    check_vector_env(lambda: MySim(num_envs=4, device="cpu", max_episode_steps=10))
    check_vector_env("custom:my_pkg.sim:make_env", num_envs=4, max_episode_steps=10)

Each rule of ``genpol.envs.core`` (and ``genpol.envs.custom`` for what a custom backend adds) is checked in turn;
the first broken one raises ``ProtocolViolation`` naming the rule, the env and what was seen. On
success the names of the rules checked are returned (exact resume is skipped, and not listed,
for an env without ``state_dict`` unless ``exact_resume=True`` demands it).

The suite needs episodes to end within ``steps`` steps under random actions: give the env a short
time limit. It builds several fresh envs from the factory, all with the same configuration.
"""

from __future__ import annotations

import io
from typing import Any, Callable

import torch

from .core import saves_state
from .custom import step_problems

RULES = (
    "attributes",                  # num_envs, device, obs_dim, act_dim, action bounds [A] on the device
    "reset returns obs",           # reset(seed) -> obs [N, D] float32 on the device, finite
    "step returns the 5-tuple",    # (obs, reward, terminated, truncated, info) shapes, dtypes, devices
    "returned tensors are fresh",  # a later step does not overwrite tensors handed out before
    "final observation",           # info["final_obs"]: the true last obs where an episode ended, obs elsewhere
    "time limit",                  # episodes end exactly at max_episode_steps, none truncated before
    "episode statistics",          # provides_episode_stats: returns and lengths of the ended episodes
    "seeded reset",                # the same seed gives the same episodes; (optionally) seeds differ
    "exact resume",                # state_dict -> torch.save/load(weights_only) -> load_state_dict continues exactly
    "success flag",                # reports_success: every step's info["success"] is [N] bool on the device
)


class ProtocolViolation(AssertionError):
    """A rule of the vector-env protocol that the env breaks; the message starts with the rule."""


class _Rule:
    """Context that turns any failure inside it, the env's own exceptions included, into a
    ``ProtocolViolation`` naming the rule."""

    def __init__(self, name: str, env_id: str):
        self.name, self.env_id = name, env_id

    def fail(self, message: str) -> None:
        raise ProtocolViolation(f"rule '{self.name}' broken by {self.env_id}: {message}")

    def __enter__(self) -> _Rule:
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, traceback: Any) -> bool:
        if error is None or isinstance(error, ProtocolViolation):
            return False
        raise ProtocolViolation(f"rule '{self.name}' broken by {self.env_id}: the env raised "
                                f"{type(error).__name__}: {error}") from error


def _actions(env: Any, steps: int, seed: int) -> torch.Tensor:
    """Uniform actions in the env's bounds ([-1, 1] where a bound is infinite): ``[steps, N, A]``."""
    low, high = env.action_low.cpu().float(), env.action_high.cpu().float()
    finite = torch.isfinite(low) & torch.isfinite(high)
    low = torch.where(finite, low, -torch.ones_like(low))
    high = torch.where(finite, high, torch.ones_like(high))
    noise = torch.rand(steps, env.num_envs, env.act_dim, generator=torch.Generator().manual_seed(seed))
    return (low + noise * (high - low)).to(env.device)


def _rollout(env: Any, actions: torch.Tensor) -> list[tuple]:
    """Step through ``actions [T, N, A]``; every result's tensors cloned."""
    results = []
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        results.append((obs.clone(), reward.clone(), terminated.clone(), truncated.clone(),
                        {key: value.clone() if isinstance(value, torch.Tensor) else value for key, value in info.items()}))
    return results


def _first_difference(a: list[tuple], b: list[tuple]) -> str | None:
    names = ("obs", "reward", "terminated", "truncated")
    for t, (x, y) in enumerate(zip(a, b)):
        for name, u, v in zip(names, x[:4], y[:4]):
            if not torch.equal(u, v):
                return f"{name} differs at step {t}"
        if not torch.equal(x[4]["final_obs"], y[4]["final_obs"]):
            return f"info['final_obs'] differs at step {t}"
    return None


def check_vector_env(make_env: str | Callable[[], Any], *, steps: int = 200, seed: int = 0,
                     exact_resume: bool | None = None, distinct_seeds: bool = True, **make_kwargs: Any) -> list[str]:
    """Check an env against every rule in ``RULES``; the names of the rules checked.

    Args:
        make_env: a zero-argument factory of fresh, identically configured envs, or an env id
            (``"custom:my_pkg.sim:make_env"``) built by ``genpol.envs.make_backend(id, **make_kwargs)``.
        steps: random-action steps per rollout; some episode must end within them.
        seed: reset seed of the rollouts (``seed + 1`` for the "seeds differ" check).
        exact_resume: True demands ``state_dict``/``load_state_dict``; None checks them if present;
            False skips them.
        distinct_seeds: also demand that two seeds give different episodes (off for deterministic
            tasks such as MultiGoal, which always starts at the origin).

    Raises:
        ProtocolViolation: naming the first rule broken.
    """
    if isinstance(make_env, str):
        from . import make_backend

        def make() -> Any:
            return make_backend(make_env, **make_kwargs)
    else:
        make = make_env
    checked: list[str] = []
    env = make()
    env_id = f"{getattr(env, 'env_id', '?')} ({type(getattr(env, 'env', env)).__qualname__})"
    try:
        _check_attributes(env, env_id)
        checked.append("attributes")
        actions = _actions(env, steps, seed)
        _check_reset_and_steps(env, env_id, actions, seed)
        checked += ["reset returns obs", "step returns the 5-tuple", "returned tensors are fresh"]
    finally:
        _close(env)
    checked += _check_episode_ends(make, env_id, actions, seed)
    _check_seeding(make, env_id, actions, seed, distinct_seeds)
    checked.append("seeded reset")
    checked += _check_exact_resume(make, env_id, actions, seed, exact_resume)
    checked += _check_success_flag(make, env_id, actions, seed)
    return checked


def _check_success_flag(make: Callable[[], Any], env_id: str, actions: torch.Tensor, seed: int) -> list[str]:
    """For an env that ``reports_success``: ``info["success"]`` ``[N]`` bool on the device at every step."""
    env = make()
    try:
        if not getattr(env, "reports_success", False):
            return []
        with _Rule("success flag", env_id) as rule:
            env.reset(seed)
            for t, action in enumerate(actions):
                success = env.step(action)[4].get("success")
                if not isinstance(success, torch.Tensor) or tuple(success.shape) != (env.num_envs,) \
                        or success.dtype != torch.bool or success.device != env.device:
                    seen = (list(success.shape), success.dtype, success.device) if isinstance(success, torch.Tensor) \
                        else type(success).__name__
                    rule.fail(f"at step {t}: info['success'] must be [{env.num_envs}] bool on {env.device} when "
                              f"reports_success is True, got {seen}")
        return ["success flag"]
    finally:
        _close(env)


def _close(env: Any) -> None:
    close = getattr(env, "close", None)
    if close is not None:
        close()


def _check_attributes(env: Any, env_id: str) -> None:
    with _Rule("attributes", env_id) as rule:
        missing = [name for name in ("num_envs", "device", "obs_dim", "act_dim", "action_low", "action_high",
                                     "reset", "step") if not hasattr(env, name)]
        if missing:
            rule.fail(f"missing {', '.join(missing)}")
        if not isinstance(env.device, torch.device):
            rule.fail(f"device must be a torch.device, got {type(env.device).__name__}")
        for name in ("num_envs", "obs_dim", "act_dim"):
            value = getattr(env, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                rule.fail(f"{name} must be an int >= 1, got {value!r}")
        for name in ("action_low", "action_high"):
            bound = getattr(env, name)
            if not isinstance(bound, torch.Tensor) or tuple(bound.shape) != (env.act_dim,):
                rule.fail(f"{name} must be a tensor [act_dim] = [{env.act_dim}]")
            if bound.dtype != torch.float32 or bound.device != env.device:
                rule.fail(f"{name} must be float32 on {env.device}, got {bound.dtype} on {bound.device}")
        if not bool((env.action_low <= env.action_high).all()):
            rule.fail("action_low must be <= action_high")


def _check_reset_and_steps(env: Any, env_id: str, actions: torch.Tensor, seed: int) -> None:
    n, d = env.num_envs, env.obs_dim
    with _Rule("reset returns obs", env_id) as rule:
        obs = env.reset(seed)
        if not isinstance(obs, torch.Tensor) or tuple(obs.shape) != (n, d) or obs.dtype != torch.float32 \
                or obs.device != env.device:
            rule.fail(f"reset() must return obs [{n}, {d}] float32 on {env.device}, got "
                      f"{(list(obs.shape), obs.dtype, obs.device) if isinstance(obs, torch.Tensor) else type(obs)}")
        if not bool(torch.isfinite(obs).all()):
            rule.fail("reset() returned non-finite observations")
    handed_out = [("reset()'s obs", obs, obs.clone())]
    for t, action in enumerate(actions[:3]):
        with _Rule("step returns the 5-tuple", env_id) as rule:
            result = env.step(action)
            problems = step_problems(result, n, d, env.device)
            if problems:
                rule.fail(f"at step {t}: {'; '.join(problems)}")
        with _Rule("returned tensors are fresh", env_id) as rule:
            for name, tensor, copy in handed_out:
                if not torch.equal(tensor, copy):
                    rule.fail(f"{name} changed when step {t} ran: return new tensors (obs.clone()), "
                              "not views of buffers the simulator writes in place")
            handed_out = [(f"step {t}'s {name}", tensor, tensor.clone()) for name, tensor in
                          zip(("obs", "reward", "terminated", "truncated", "info['final_obs']"),
                              (*result[:4], result[4]["final_obs"]))]


def _check_seeding(make: Callable[[], Any], env_id: str, actions: torch.Tensor, seed: int, distinct: bool) -> None:
    def trajectory(reset_seed: int) -> tuple[torch.Tensor, list[tuple]]:
        env = make()
        try:
            first = env.reset(reset_seed).clone()
            return first, _rollout(env, actions[:50])
        finally:
            _close(env)

    with _Rule("seeded reset", env_id) as rule:
        (first_a, steps_a), (first_b, steps_b) = trajectory(seed), trajectory(seed)
        if not torch.equal(first_a, first_b):
            rule.fail(f"two fresh envs reset with seed {seed} return different observations")
        difference = _first_difference(steps_a, steps_b)
        if difference:
            rule.fail(f"two fresh envs reset with seed {seed} and given the same actions diverge: {difference}")
        if distinct:
            first_c, steps_c = trajectory(seed + 1)
            if torch.equal(first_a, first_c) and _first_difference(steps_a, steps_c) is None:
                rule.fail(f"seeds {seed} and {seed + 1} give identical episodes: reset(seed) ignores its seed "
                          "(pass distinct_seeds=False for a deterministic task)")


def _check_episode_ends(make: Callable[[], Any], env_id: str, actions: torch.Tensor, seed: int) -> list[str]:
    env = make()
    limit = getattr(env, "max_episode_steps", None)
    provides_stats = bool(getattr(env, "provides_episode_stats", False))
    try:
        env.reset(seed)
        n = env.num_envs
        lengths = torch.zeros(n, dtype=torch.int64)
        returns = torch.zeros(n, dtype=torch.float64)
        ended_any = False
        for t, action in enumerate(actions):
            with _Rule("step returns the 5-tuple", env_id) as rule:
                result = env.step(action)
                problems = step_problems(result, n, env.obs_dim, env.device)
                if problems:
                    rule.fail(f"at step {t}: {'; '.join(problems)}")
            obs, reward, terminated, truncated, info = result
            obs, reward, terminated, truncated = obs.cpu(), reward.cpu(), terminated.cpu(), truncated.cpu()
            final_obs = info["final_obs"].cpu()
            # in env steps, as max_episode_steps and episode_length count them: a chunked env runs several per step
            lengths += info["env_steps"].cpu() if "env_steps" in info else 1
            returns += reward.double()
            ended = terminated | truncated
            with _Rule("final observation", env_id) as rule:
                if not torch.equal(final_obs[~ended], obs[~ended]):
                    rule.fail(f"at step {t} info['final_obs'] differs from obs for env(s) "
                              f"{_indices(~ended & (final_obs != obs).any(dim=1))}, whose episodes did not end")
                same = ended & (final_obs == obs).all(dim=1)
                if bool(same.any()):
                    kind = "truncation" if bool((same & truncated).any()) else "termination"
                    rule.fail(f"missing final observation on {kind}: at step {t} info['final_obs'] of env(s) "
                              f"{_indices(same)} equals the next episode's first obs; it must hold the true last "
                              "observation (learners bootstrap truncated episodes from it)")
                if not bool(torch.isfinite(final_obs).all()):
                    rule.fail(f"non-finite info['final_obs'] at step {t}")
            if limit is not None:
                with _Rule("time limit", env_id) as rule:
                    if bool((lengths > limit).any()) or not bool(ended[lengths >= limit].all()):
                        rule.fail(f"env(s) {_indices((lengths >= limit) & ~ended)} reached max_episode_steps="
                                  f"{limit} at step {t} without ending")
                    if bool(truncated[lengths < limit].any()):
                        rule.fail(f"env(s) {_indices(truncated & (lengths < limit))} truncated at step {t} after "
                                  f"{lengths[truncated & (lengths < limit)].tolist()} steps, before max_episode_steps={limit}")
            if provides_stats and bool(ended.any()):
                with _Rule("episode statistics", env_id) as rule:
                    got_returns = info.get("episode_return")
                    got_lengths = info.get("episode_length")
                    if got_returns is None or got_lengths is None:
                        rule.fail("provides_episode_stats is set but info lacks episode_return / episode_length")
                    if not torch.allclose(got_returns.cpu().double(), returns[ended], rtol=1e-4, atol=1e-4) \
                            or not torch.equal(got_lengths.cpu().long(), lengths[ended]):
                        rule.fail(f"at step {t} the episode statistics {got_returns.tolist()} / {got_lengths.tolist()} "
                                  f"are not the ended episodes' {returns[ended].tolist()} / {lengths[ended].tolist()}")
            lengths[ended], returns[ended] = 0, 0.0
            ended_any |= bool(ended.any())
    finally:
        _close(env)
    if not ended_any:
        raise ProtocolViolation(f"rule 'final observation' could not be checked on {env_id}: no episode ended in "
                                f"{len(actions)} steps; give the env a short time limit (max_episode_steps)")
    return (["final observation"] + (["time limit"] if limit is not None else [])
            + (["episode statistics"] if provides_stats else []))


def _check_exact_resume(make: Callable[[], Any], env_id: str, actions: torch.Tensor, seed: int,
                        required: bool | None) -> list[str]:
    if required is False:
        return []
    env = make()
    try:
        saves = saves_state(env) and getattr(env, "exact_resume", True)  # a CustomVectorEnv says for its env
        if not saves:
            if required:
                raise ProtocolViolation(f"rule 'exact resume' broken by {env_id}: no state_dict()/load_state_dict()")
            return []
        with _Rule("exact resume", env_id) as rule:
            env.reset(seed)
            _rollout(env, actions[:17])  # mid-episode for short time limits, and past some episode ends
            buffer = io.BytesIO()
            torch.save(env.state_dict(), buffer)
            expected = _rollout(env, actions[17:80])
            buffer.seek(0)
            try:
                state = torch.load(buffer, weights_only=True)
            except Exception as error:  # noqa: BLE001 - the reason weights-only loading refused it
                rule.fail(f"state_dict() holds something torch.load(weights_only=True) refuses (checkpoints load "
                          f"that way; keep to tensors, numbers, strings, lists and dicts): {error}")
            fresh = make()
            try:
                fresh.reset(seed + 12345)
                fresh.load_state_dict(state)
                got = _rollout(fresh, actions[17:80])
            finally:
                _close(fresh)
            difference = _first_difference(expected, got)
            if difference:
                rule.fail(f"a fresh env given state_dict() after 17 steps does not continue the same episodes: "
                          f"{difference} after the restore")
    finally:
        _close(env)
    return ["exact resume"]


def _indices(mask: torch.Tensor) -> list[int]:
    return torch.nonzero(mask).flatten().tolist()


__all__ = ["RULES", "ProtocolViolation", "check_vector_env"]

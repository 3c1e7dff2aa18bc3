"""Off-policy training throughput: genpol's SAC against stable-baselines3's, side by side, and against
the compute floor, on HalfCheetah-v5; then the cost of RLPD's 10-critic ensemble.

SAC rows (1 env, 256-256 networks, batch 256, one gradient step per env step, ``learning_starts`` 1000):

* ``SB3``: ``SAC("MlpPolicy", env, learning_starts=1000)``, SB3's defaults otherwise, 1 and 2 torch threads;
* ``genpol``: ``+experiment=sac env=halfcheetah learner.learning_starts=1000`` through the real learner
  (``make_algorithm``) and loop (``OffPolicyRunner.iterate``): eager (``learner.compile=false``) at 1
  and 2 threads, compiled (``learner.compile=true``, what the experiment sets) at 1 and 2 threads, and
  eager with the critics' previous GEMMs (``QEnsemble(impl="batched")``: MKL ``baddbmm``) at 1 thread;
  each also timed on ``update()`` alone, what the floor rows compare with;
* ``genpol, actor GEMMs in MKL``: the eager 1-thread row with the actor's 256 x 256 layer back in MKL
  (``OneDNNLinear.use_onednn`` off: genpol before ``genpol.onednn``), what oneDNN in the actor buys;
* ``floor``: the same gradient step on raw tensors (no modules, no replay classes, no loop): the twin
  critic as batched matmuls, the actor as ``addmm``, hand-written losses, three fused Adams, one
  ``_foreach_lerp_``. ``floor, baddbmm`` is the issue's definition (MKL ``baddbmm`` for every critic
  layer); ``floor, genpol's kernels`` runs the critic's layers with the kernels genpol picks at that
  thread count (``QEnsemble``'s ``default_impl`` and ``OneDNNLinear``: oneDNN GEMMs for the critics and
  the actor's 256 x 256 layer on 1 thread, ``baddbmm`` and ``addmm`` on 2, the 1-wide output layer as a
  dot product) without its modules, so genpol's fraction of the floor is quoted against it.

Ensemble rows (RLPD's critic: 10 heads with LayerNorm, batch 256):

* ``E=10 update``: forward, MSE to a fixed target, backward, fused Adam (``bench/ensemble.py``'s
  unit), for the bare ``baddbmm`` floor and ``QEnsemble`` with ``impl`` batched, func and onednn;
* ``RLPD critic step``: genpol's ``SAC.critic_step`` (actor sample on s', target ensemble, subset-min
  of 2, TD target, update, Polyak) against the same step on raw tensors (``baddbmm``, and genpol's kernels);
* ``RLPD``: ``+experiment=rlpd env=halfcheetah`` (10 LayerNorm critics, UTD 20, batch 256, half of
  every batch from an offline HalfCheetah file of random-policy transitions this script writes),
  milliseconds per env step, eager and compiled.

The machine is noisy (2 shared cores): every row is built and warmed up first (past
``learning_starts``, compiled rows compiled), then ``--rounds`` rounds run one timed segment of every
row, in alternating order. Rows report medians over rounds; ratios are medians of the per-round
ratios (each against the other row measured in the same round). Each segment records wall and
process CPU time: where a 1-thread row's CPU time falls well below its wall time, another job held
its core. A job on the second core stalls every 2-thread parallel region (steps of 100+ ms), so a
probe (the bare step at 1 and 2 threads) runs before the 2-thread rows are built and before each
round: 2-thread segments run only where 2 threads beat 1 (``--two-threads on`` forces them), and any
segment stops after ``SEGMENT_SECONDS``. The load average is recorded before and after.

    python bench/sac_throughput.py [--rounds 7] [--steps 100] [--rlpd-steps 4] [--two-threads auto|on|off]
                                   [--out sac_throughput.json]

Writes ``bench/results/sac_throughput.json`` (``--out``: another name, one per CPU model; the file
records the model, ``common.cpu_model``) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import statistics
import tempfile
import time
import warnings
from typing import Any, Callable

import torch
import torch.nn.functional as F

from genpol.qensemble import ONEDNN_AVAILABLE, QEnsemble, _HeadwiseOneDNNLinear, _HeadwiseOutput, default_impl

from common import cpu_model, date_stamp, load_average, machine, write_results

ENV_ID = "HalfCheetah-v5"
OBS_DIM, ACT_DIM, BATCH, HIDDEN, LR = 17, 6, 256, 256, 3e-4
GAMMA, TAU = 0.99, 0.005
LEARNING_STARTS = 1000
CHUNK = 10  # env steps per call of the loop (SB3's learn, genpol's iterate) inside a timed segment
HEADLINE = ("SB3 SAC, 1 thread", "genpol SAC eager, 1 thread", "genpol SAC compiled, 1 thread",
            "genpol SAC compiled, 2 threads", "genpol SAC eager, 2 threads", "SB3 SAC, 2 threads")
# The figures, measured earlier on this machine type with one torch thread.
REFERENCE = {"twin critic step ms (1 thread)": 4.2, "E=10 batched-matmul step ms (1 thread)": 27.0,
             "E=10 batched-matmul step ms (2 threads)": 14.0, "SB3 SAC gradient steps/s (1 thread)": 71.0}


# --------------------------------------------------------------------------- timing
SEGMENT_SECONDS = 6.0  # a segment stops early past this (a stalled 2-thread row would run for minutes)


def timed(threads: int, unit: Callable[[], tuple[int, int]], units: int) -> dict[str, float]:
    """Run ``unit() -> (env_steps, gradient_steps)`` ``units`` times at ``threads`` torch threads (fewer
    if ``SEGMENT_SECONDS`` pass first); the summed steps, wall and CPU seconds."""
    torch.set_num_threads(threads)
    wall, cpu = time.perf_counter(), time.process_time()
    env_steps = gradient_steps = done = 0
    while done < units and (done == 0 or time.perf_counter() - wall < SEGMENT_SECONDS):
        unit_env_steps, unit_gradient_steps = unit()
        env_steps, gradient_steps, done = env_steps + unit_env_steps, gradient_steps + unit_gradient_steps, done + 1
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
            "env_steps": env_steps, "gradient_steps": gradient_steps, "cut_short": done < units}


# --------------------------------------------------------------------------- learners
class Sb3Learner:
    """stable-baselines3 SAC at its defaults (``learning_starts=1000``), 1 env, warmed up past learning starts."""

    def __init__(self, threads: int, steps: int):
        import gymnasium as gym
        from stable_baselines3 import SAC

        self.threads, self.steps = threads, steps
        torch.set_num_threads(threads)
        self.model = SAC("MlpPolicy", gym.make(ENV_ID), learning_starts=LEARNING_STARTS, device="cpu", seed=0,
                         verbose=0)
        self.model.learn(LEARNING_STARTS + 50)

    def segment(self) -> dict[str, float]:
        def unit() -> tuple[int, int]:
            updates, timesteps = self.model._n_updates, self.model.num_timesteps
            self.model.learn(CHUNK, reset_num_timesteps=False)
            return self.model.num_timesteps - timesteps, self.model._n_updates - updates

        return timed(self.threads, unit, self.steps // CHUNK)


def route_linears_through_mkl(module: torch.nn.Module) -> None:
    """The actor as genpol ran it before ``genpol.onednn``: every layer's GEMMs in MKL (``F.linear``)."""
    from genpol.onednn import OneDNNLinear

    for linear in module.modules():
        if isinstance(linear, OneDNNLinear):
            linear.use_onednn = False


class GenpolLearner:
    """genpol's learner built as ``genpol.train`` builds it, trained through ``OffPolicyRunner.iterate``
    (``bench/maxent_cost.py`` builds its rows with it too, on other env groups)."""

    def __init__(self, overrides: list[str], threads: int, steps: int, offline_path: str | None = None,
                 critic_impl: str | None = None, mkl_actor: bool = False, warmup_steps: int = 50,
                 chunk: int = CHUNK, env_group: str = "halfcheetah"):
        from genpol.algorithms import make_algorithm
        from genpol.api import compose_config
        from genpol.build import env_stack, make_env, make_head
        from genpol.configure import validate
        from genpol.runners.offpolicy import OffPolicyRunner, load_offline_transitions
        from genpol.pipelines.online import off_policy_env_settings

        self.threads, self.steps = threads, steps
        torch.set_num_threads(threads)
        dataset = [f"dataset.path={offline_path}"] if offline_path else []
        cfg = validate(compose_config(["run_dir=/tmp/unused", f"env={env_group}", *overrides, *dataset,
                                       f"learner.iteration_steps={min(steps, chunk)}"]))
        torch.manual_seed(0)
        stack = {**env_stack(cfg.policy), **off_policy_env_settings(cfg)}
        env = make_env(cfg.env, gamma=cfg.learner.gamma, seed=0, device=cfg.device, stack=stack)
        head = make_head(cfg.policy, env.obs_dim, env.act_dim).to(cfg.device)
        if mkl_actor:
            route_linears_through_mkl(head)
        offline = load_offline_transitions(cfg, env)[0] if offline_path else None
        self.algorithm = make_algorithm(cfg, head, env, offline)
        if critic_impl is not None:
            self.algorithm.critic.impl = self.algorithm.critic_target.impl = critic_impl
        self.cfg = cfg
        critic = getattr(self.algorithm, "critic", None)  # MEow has none: its flow gives the soft Q
        self.settings = {"threads": threads, "critic_impl": getattr(critic, "impl", None), "compile": cfg.learner.compile,
                         "mkl_actor": mkl_actor, "overrides": overrides}
        self.runner = OffPolicyRunner(env, self.algorithm, total_steps=10**9, seed=0, iteration_steps=min(steps, chunk))
        self.runner.obs = env.reset(seed=0)
        start = time.perf_counter()
        self.runner.vector_steps = cfg.learner.learning_starts + warmup_steps  # compiled rows compile here
        self.runner.iterate()
        self.runner.vector_steps = min(steps, chunk)
        self.warmup_s = time.perf_counter() - start

    def segment(self) -> dict[str, float]:
        """``steps`` env steps of the loop, ``runner.iterate()`` over ``vector_steps`` of them at a time."""
        def unit() -> tuple[int, int]:
            env_steps, critic_steps = self.runner.global_step, self.algorithm.critic_steps
            self.runner.iterate()
            return self.runner.global_step - env_steps, self.algorithm.critic_steps - critic_steps

        return timed(self.threads, unit, self.steps // self.runner.vector_steps)

    def update_segment(self, updates: int) -> dict[str, float]:
        """``updates`` calls of ``update()`` alone (no env, no acting): what the floor rows measure."""
        def unit() -> tuple[int, int]:
            critic_steps = self.algorithm.critic_steps
            self.algorithm.update()
            return 0, self.algorithm.critic_steps - critic_steps

        return timed(self.threads, unit, updates)

    def critic_step_segment(self) -> dict[str, float]:
        """One RLPD round's critic steps alone: ``utd`` calls of ``SAC.critic_step`` on the minibatches
        of one mixed draw, as ``rlpd_round`` makes them."""
        algorithm, utd = self.algorithm, self.cfg.learner.utd

        minibatches = algorithm.sampler.sample(self.cfg.learner.batch_size * utd).chunk(utd)
        alpha = algorithm.alpha

        def unit() -> tuple[int, int]:
            algorithm.critic_step(minibatches.pop(0), alpha)
            return 0, 1

        return timed(self.threads, unit, utd)


# --------------------------------------------------------------------------- the bare floor
def uniform(shape: tuple[int, ...], fan_in: int, generator: torch.Generator) -> torch.Tensor:
    return ((torch.rand(shape, generator=generator) * 2 - 1) / math.sqrt(fan_in)).requires_grad_()


class BareCritic:
    """E critics on raw leaf tensors ``[E, in, out]`` (and per-head LayerNorm ``[E, 1, H]``)."""

    def __init__(self, num_qs: int, layer_norm: bool, generator: torch.Generator):
        sizes = [OBS_DIM + ACT_DIM, HIDDEN, HIDDEN, 1]
        self.weights = [uniform((num_qs, fan_in, fan_out), fan_in, generator) for fan_in, fan_out in zip(sizes[:-1], sizes[1:])]
        self.biases = [uniform((num_qs, 1, fan_out), fan_in, generator) for fan_in, fan_out in zip(sizes[:-1], sizes[1:])]
        self.scales = [torch.ones(num_qs, 1, HIDDEN, requires_grad=True) for _ in range(2)] if layer_norm else []
        self.shifts = [torch.zeros(num_qs, 1, HIDDEN, requires_grad=True) for _ in range(2)] if layer_norm else []
        self.num_qs, self.layer_norm = num_qs, layer_norm

    def parameters(self) -> list[torch.Tensor]:
        return self.weights + self.biases + self.scales + self.shifts

    def copy(self) -> "BareCritic":
        twin = object.__new__(BareCritic)
        twin.__dict__.update(self.__dict__)
        for name in ("weights", "biases", "scales", "shifts"):
            setattr(twin, name, [tensor.detach().clone() for tensor in getattr(self, name)])
        return twin

    def __call__(self, obs: torch.Tensor, actions: torch.Tensor, kernel: str, frozen: bool = False) -> torch.Tensor:
        """``q [E, B]``. ``kernel`` "baddbmm": ``baddbmm`` for every layer (the issue's floor); "batched":
        ``baddbmm`` for the hidden layers, the 1-wide output as genpol's dot product; "onednn": the hidden
        layers as oneDNN GEMMs, the output as "batched" (genpol's kernels for ``impl`` batched, onednn)."""
        parameters = [[t.detach() for t in group] if frozen else group
                      for group in (self.weights, self.biases, self.scales, self.shifts)]
        weights, biases, scales, shifts = parameters
        hidden = torch.cat([obs, actions], dim=-1).expand(self.num_qs, -1, -1)
        fused_relu = kernel == "onednn" and not self.layer_norm
        for layer, (weight, bias) in enumerate(zip(weights[:-1], biases[:-1])):
            hidden = (_HeadwiseOneDNNLinear.apply(hidden, weight, bias, fused_relu) if kernel == "onednn"
                      else torch.baddbmm(bias, hidden, weight))
            if self.layer_norm:
                hidden = torch.addcmul(shifts[layer], F.layer_norm(hidden, (HIDDEN,)), scales[layer])
            if not fused_relu:
                hidden = torch.relu(hidden)
        if kernel == "baddbmm":
            return torch.baddbmm(biases[-1], hidden, weights[-1]).squeeze(-1)
        return _HeadwiseOutput.apply(hidden, weights[-1], biases[-1]).squeeze(-1)


class BareActor:
    """The tanh-Gaussian actor on raw tensors (``[in, out]`` weights, ``addmm``; or oneDNN GEMMs for the
    256 x 256 layer, as ``genpol.onednn.OneDNNLinear`` on one thread)."""

    def __init__(self, generator: torch.Generator, exact_log_prob: bool):
        sizes = [(OBS_DIM, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, 2 * ACT_DIM)]  # mu and log_std in one GEMM
        self.weights = [uniform(size, size[0], generator) for size in sizes]
        self.biases = [uniform((size[1],), size[0], generator) for size in sizes]
        self.exact_log_prob = exact_log_prob

    def parameters(self) -> list[torch.Tensor]:
        return self.weights + self.biases

    def __call__(self, obs: torch.Tensor, kernel: str) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = obs
        for layer, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            if kernel == "onednn" and layer == 1:
                hidden = _HeadwiseOneDNNLinear.apply(hidden.unsqueeze(0), weight.unsqueeze(0), bias.view(1, 1, -1),
                                                     True).squeeze(0)
            else:
                hidden = torch.addmm(bias, hidden, weight)
                hidden = torch.relu(hidden) if layer < 2 else hidden
        mean, log_std = hidden.split(ACT_DIM, dim=-1)
        log_std = log_std.clamp(-20.0, 2.0)
        noise = torch.randn_like(mean)
        pre_tanh = mean + noise * log_std.exp()
        gaussian = (-0.5 * noise.square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        if self.exact_log_prob:
            jacobian = 2 * (math.log(2.0) - pre_tanh - F.softplus(-2 * pre_tanh))
        else:
            jacobian = torch.log(1 - torch.tanh(pre_tanh).square() + 1e-6)
        return torch.tanh(pre_tanh), gaussian - jacobian.sum(-1)


class BareReplay:
    """Random transitions in plain tensors, sampled as genpol's replay samples (uniform, with replacement)."""

    def __init__(self, generator: torch.Generator, rows: int = 10_000):
        self.obs, self.next_obs = torch.randn(rows, OBS_DIM, generator=generator), torch.randn(rows, OBS_DIM, generator=generator)
        self.actions = torch.rand(rows, ACT_DIM, generator=generator) * 2 - 1
        self.rewards, self.dones = torch.randn(rows, generator=generator), torch.zeros(rows)
        self.generator = generator

    def sample(self, size: int) -> tuple[torch.Tensor, ...]:
        rows = torch.randint(self.obs.shape[0], (size,), generator=self.generator)
        return self.obs[rows], self.actions[rows], self.rewards[rows], self.next_obs[rows], self.dones[rows]


class FloorSAC:
    """One SB3-order SAC gradient step on raw tensors: ``critic_kernel`` as ``BareCritic``'s, ``actor_kernel``
    "mkl" or "onednn"."""

    def __init__(self, threads: int, critic_kernel: str, actor_kernel: str = "mkl", steps: int = 50):
        self.threads, self.steps = threads, steps
        self.critic_kernel, self.actor_kernel = critic_kernel, actor_kernel
        generator = torch.Generator().manual_seed(0)
        self.critic, self.actor = BareCritic(2, False, generator), BareActor(generator, exact_log_prob=False)
        self.target = self.critic.copy()
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.replay = BareReplay(generator)
        self.optimizers = [torch.optim.Adam(params, lr=LR, fused=True)
                           for params in (self.critic.parameters(), self.actor.parameters(), [self.log_alpha])]
        torch.set_num_threads(threads)
        for _ in range(3):
            self.step()

    def step(self) -> None:
        critic_optimizer, actor_optimizer, alpha_optimizer = self.optimizers
        obs, actions, rewards, next_obs, dones = self.replay.sample(BATCH)
        actions_pi, log_prob = self.actor(obs, self.actor_kernel)
        alpha = self.log_alpha.detach().exp()
        alpha_optimizer.zero_grad(set_to_none=True)
        (-(self.log_alpha * (log_prob.detach() - ACT_DIM)).mean()).backward()
        alpha_optimizer.step()
        with torch.no_grad():
            next_actions, next_log_prob = self.actor(next_obs, self.actor_kernel)
            next_q = self.target(next_obs, next_actions, self.critic_kernel).min(0).values
            target = rewards + (1 - dones) * GAMMA * (next_q - alpha * next_log_prob)
        q = self.critic(obs, actions, self.critic_kernel)
        critic_optimizer.zero_grad(set_to_none=True)
        (0.5 * (q - target).square().mean(1).sum()).backward()
        critic_optimizer.step()
        q_pi = self.critic(obs, actions_pi, self.critic_kernel, frozen=True)
        actor_optimizer.zero_grad(set_to_none=True)
        (alpha * log_prob - q_pi.min(0).values).mean().backward()
        actor_optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(self.target.parameters(), self.critic.parameters(), TAU)

    def segment(self) -> dict[str, float]:
        def unit() -> tuple[int, int]:
            self.step()
            return 0, 1

        return timed(self.threads, unit, self.steps)


class FloorRLPDCriticStep:
    """RLPD's critic step on raw tensors: actor sample on s' (exact tanh log-prob), 10 LayerNorm target
    heads, subset-min of 2, TD target with the entropy backup, mean-MSE update, fused Adam, Polyak."""

    def __init__(self, threads: int, kernel: str, utd: int = 20):
        self.threads, self.kernel, self.utd = threads, kernel, utd
        generator = torch.Generator().manual_seed(0)
        self.critic, self.actor = BareCritic(10, True, generator), BareActor(generator, exact_log_prob=True)
        self.target = self.critic.copy()
        self.replay, self.generator = BareReplay(generator), generator
        self.optimizer = torch.optim.Adam(self.critic.parameters(), lr=LR, fused=True)
        torch.set_num_threads(threads)
        self.segment()

    def step(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor,
             dones: torch.Tensor) -> None:
        with torch.no_grad():
            next_actions, next_log_prob = self.actor(next_obs, "mkl")
            heads = torch.randperm(10, generator=self.generator)[:2]
            next_q = self.target(next_obs, next_actions, self.kernel).index_select(0, heads).min(0).values
            target = rewards + (1 - dones) * GAMMA * (next_q - next_log_prob)
        self.optimizer.zero_grad(set_to_none=True)
        (self.critic(obs, actions, self.kernel) - target).square().mean().backward()
        self.optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(self.target.parameters(), self.critic.parameters(), TAU)

    def segment(self) -> dict[str, float]:
        minibatches = list(zip(*(part.chunk(self.utd) for part in self.replay.sample(BATCH * self.utd))))

        def unit() -> tuple[int, int]:
            self.step(*minibatches.pop(0))
            return 0, 1

        return timed(self.threads, unit, self.utd)


class EnsembleUpdate:
    """One E=10 LayerNorm ensemble update (forward, MSE to a fixed target, backward, fused Adam), on raw
    tensors with MKL ``baddbmm`` (``impl="floor"``) or through ``QEnsemble(impl=...)``."""

    def __init__(self, threads: int, impl: str, updates: int = 10):
        self.threads, self.updates = threads, updates
        generator = torch.Generator().manual_seed(0)
        self.obs, self.actions = torch.randn(BATCH, OBS_DIM, generator=generator), torch.rand(BATCH, ACT_DIM, generator=generator)
        self.target = torch.randn(BATCH, generator=generator)
        if impl == "floor":
            bare = BareCritic(10, True, generator)
            self.forward, parameters = (lambda: bare(self.obs, self.actions, "baddbmm")), bare.parameters()
        else:
            ensemble = QEnsemble(OBS_DIM, ACT_DIM, 10, (HIDDEN, HIDDEN), layer_norm=True, init="xavier", impl=impl)
            self.forward, parameters = (lambda: ensemble(self.obs, self.actions)), list(ensemble.parameters())
        self.optimizer = torch.optim.Adam(parameters, lr=LR, fused=True)
        torch.set_num_threads(threads)
        self.segment()

    def segment(self) -> dict[str, float]:
        def unit() -> tuple[int, int]:
            self.optimizer.zero_grad(set_to_none=True)
            (self.forward() - self.target).square().mean().backward()
            self.optimizer.step()
            return 0, 1

        return timed(self.threads, unit, self.updates)


# --------------------------------------------------------------------------- the run
def matched_kernels() -> dict[int, str]:
    """The critic kernels genpol picks at 1 and 2 threads (``QEnsemble``'s ``default_impl``)."""
    threads = torch.get_num_threads()
    kernels = {}
    for count in (1, 2):
        torch.set_num_threads(count)
        kernels[count] = default_impl()
    torch.set_num_threads(threads)
    return kernels


MATCHED = matched_kernels()


def floor_name(step: str, threads: int) -> str:
    """The floor with genpol's own critic kernels at ``threads`` threads (genpol's fraction of the floor
    is quoted against it)."""
    return f"floor {step}, genpol's kernels ({MATCHED[threads]}), {threads} thread(s)"


def contention_probe(steps: int = 5) -> dict[str, Any]:
    """The bare SAC step at 1 and 2 threads, alternated twice: ``contended`` when 2 threads are not
    faster than 1.25x one thread's time (the second core is busy)."""
    floors = {threads: FloorSAC(threads, "baddbmm", steps=steps) for threads in (1, 2)}
    times = {threads: [] for threads in floors}
    for order in ((1, 2), (2, 1)):
        for threads in order:
            times[threads].append(floors[threads].segment()["wall_s"] / steps * 1e3)
    one, two = min(times[1]), min(times[2])
    return {"ms_1_thread": one, "ms_2_threads": two, "contended": two > 1.25 * one, "load_average": load_average()}


def write_offline_file(directory: str) -> str:
    """A D4RL-format HalfCheetah file of ~2000 uniform-random transitions (RLPD mixes it into every batch)."""
    from genpol.data.collect import main as collect_main

    path = os.path.join(directory, "halfcheetah_random-v5.hdf5")
    collect_main(["--policy", "random", "--env", f"gym:{ENV_ID}", "--steps", "2000", "--num-envs", "2", "--d4rl", path])
    return path


def summarize(segments: list[dict[str, float]]) -> dict[str, Any]:
    """Medians over rounds of ms per gradient step, env-steps/s, gradient steps/s and CPU / wall."""
    def median(key: Callable[[dict[str, float]], float]) -> float:
        return statistics.median(key(segment) for segment in segments)

    summary = {"ms_per_gradient_step": median(lambda s: s["wall_s"] / s["gradient_steps"] * 1e3),
               "gradient_steps_per_s": median(lambda s: s["gradient_steps"] / s["wall_s"]),
               "cpu_over_wall": median(lambda s: s["cpu_s"] / s["wall_s"]),
               "rounds_measured": len(segments), "segments_cut_short": sum(s["cut_short"] for s in segments),
               "segments": segments}
    if segments[0]["env_steps"]:
        summary["env_steps_per_s"] = median(lambda s: s["env_steps"] / s["wall_s"])
        summary["ms_per_env_step"] = median(lambda s: s["wall_s"] / s["env_steps"] * 1e3)
    return summary


def ratio(rows: dict[str, dict], numerator: str, denominator: str, key: str) -> float | None:
    """Median over rounds of ``key``-rate(numerator) / ``key``-rate(denominator), both from the same round."""
    if numerator not in rows or denominator not in rows:
        return None
    rates = {name: {segment["round"]: segment[key] / segment["wall_s"] for segment in rows[name]["segments"]}
             for name in (numerator, denominator)}
    rounds = sorted(set(rates[numerator]) & set(rates[denominator]))
    return statistics.median(rates[numerator][r] / rates[denominator][r] for r in rounds) if rounds else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=100, help="env steps per timed SAC segment")
    parser.add_argument("--rlpd-steps", type=int, default=4, help="env steps per timed RLPD segment")
    parser.add_argument("--no-compile", action="store_true", help="leave out the learner.compile=true rows")
    parser.add_argument("--two-threads", choices=("auto", "on", "off"), default="auto",
                        help="2-thread rows: auto leaves them out when a probe finds the second core busy")
    parser.add_argument("--out", default="sac_throughput.json",
                        help="results file under bench/results (one per CPU model keeps each CPU's figures)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("genpol").setLevel(logging.WARNING)
    torch._dynamo.config.fail_on_recompile_limit_hit = True  # never time a silent eager fallback
    started = time.perf_counter()
    load_before = load_average()
    # eager rows say so: the experiments themselves set learner.compile=true
    sac = ["+experiment=sac", f"learner.learning_starts={LEARNING_STARTS}", "learner.compile=false"]
    rlpd = ["+experiment=rlpd", f"learner.learning_starts={LEARNING_STARTS}", "learner.compile=false"]
    offline_dir = tempfile.TemporaryDirectory()
    offline_path = write_offline_file(offline_dir.name)

    # name -> (segment function, group). Everything is built and warmed up before any timing.
    learners: dict[str, Any] = {}
    build_s: dict[str, float] = {}

    def build(name: str, make: Callable[[], Any]) -> None:
        start = time.perf_counter()
        learners[name] = make()
        build_s[name] = time.perf_counter() - start
        print(f"built {name} in {build_s[name]:.1f} s", flush=True)

    steps, compiled = args.steps, [] if args.no_compile else ["learner.compile=true"]
    one_thread: dict[str, Callable[[], Any]] = {
        "SB3 SAC, 1 thread": lambda: Sb3Learner(1, steps),
        "genpol SAC eager, 1 thread": lambda: GenpolLearner(sac, 1, steps),
        "genpol SAC eager, critics in MKL (impl=batched), 1 thread":
            lambda: GenpolLearner(sac, 1, steps, critic_impl="batched"),
        "genpol SAC eager, actor GEMMs in MKL (before genpol.onednn), 1 thread":
            lambda: GenpolLearner(sac, 1, steps, mkl_actor=True),
        "floor SAC step, baddbmm, 1 thread(s)": lambda: FloorSAC(1, "baddbmm"),
        floor_name("SAC step", 1): lambda: FloorSAC(1, MATCHED[1], "onednn" if MATCHED[1] == "onednn" else "mkl"),
        **{f"E=10 update, {impl}, 1 thread(s)": lambda i=impl: EnsembleUpdate(1, i)
           for impl in ("floor", "batched", "func", "onednn")},
        "floor RLPD critic step, baddbmm, 1 thread(s)": lambda: FloorRLPDCriticStep(1, "baddbmm"),
        floor_name("RLPD critic step", 1): lambda: FloorRLPDCriticStep(1, MATCHED[1]),
        "genpol RLPD eager, 1 thread": lambda: GenpolLearner(rlpd, 1, args.rlpd_steps, offline_path, warmup_steps=1, chunk=1),
        "genpol RLPD eager, critics in MKL (impl=batched), 1 thread":
            lambda: GenpolLearner(rlpd, 1, args.rlpd_steps, offline_path, critic_impl="batched", warmup_steps=1,
                                  chunk=1),
    }
    if compiled:
        one_thread["genpol SAC compiled, 1 thread"] = lambda: GenpolLearner([*sac, *compiled], 1, steps)
        one_thread["genpol RLPD compiled, 1 thread"] = lambda: GenpolLearner(
            [*rlpd, *compiled], 1, args.rlpd_steps, offline_path, warmup_steps=1, chunk=1)
    two_threads: dict[str, Callable[[], Any]] = {
        "SB3 SAC, 2 threads": lambda: Sb3Learner(2, steps),
        "genpol SAC eager, 2 threads": lambda: GenpolLearner(sac, 2, steps),
        "floor SAC step, baddbmm, 2 thread(s)": lambda: FloorSAC(2, "baddbmm"),
        floor_name("SAC step", 2): lambda: FloorSAC(2, MATCHED[2]),
        "floor SAC step, oneDNN critic, 2 thread(s)": lambda: FloorSAC(2, "onednn"),
        **{f"E=10 update, {impl}, 2 thread(s)": lambda i=impl: EnsembleUpdate(2, i)
           for impl in ("floor", "batched", "func", "onednn")},
        "floor RLPD critic step, baddbmm, 2 thread(s)": lambda: FloorRLPDCriticStep(2, "baddbmm"),
        floor_name("RLPD critic step", 2): lambda: FloorRLPDCriticStep(2, MATCHED[2]),
        "genpol RLPD eager, 2 threads": lambda: GenpolLearner(rlpd, 2, args.rlpd_steps, offline_path, warmup_steps=1, chunk=1),
    }
    if compiled:  # inductor fixes its kernels' thread count when it compiles: learners of their own
        two_threads["genpol SAC compiled, 2 threads"] = lambda: GenpolLearner([*sac, *compiled], 2, steps)
        two_threads["genpol RLPD compiled, 2 threads"] = lambda: GenpolLearner(
            [*rlpd, *compiled], 2, args.rlpd_steps, offline_path, warmup_steps=1, chunk=1)
    for name, make in one_thread.items():
        build(name, make)
    # With another job on the second core every 2-thread parallel region waits for it (steps of 100+
    # ms): then 2-thread rows measure the other job, and their warm-ups alone would take minutes.
    probe = contention_probe() if args.two_threads != "off" else None
    two_thread_rows = probe is not None and (args.two_threads == "on" or not probe["contended"])
    if two_thread_rows:
        for name, make in two_threads.items():
            build(name, make)

    # The timed segments of one round; RLPD learners also time their critic steps alone.
    segment_functions: dict[str, Callable[[], dict[str, float]]] = {}
    for name, learner in learners.items():
        segment_functions[name] = learner.segment
        if name.startswith("genpol SAC"):
            segment_functions[f"{name}, update() only"] = lambda l=learner: l.update_segment(50)
        if name.startswith("genpol RLPD"):
            segment_functions[f"{name}, 20 critic steps only"] = learner.critic_step_segment
    load_after_build = load_average()
    segments: dict[str, list[dict[str, float]]] = {name: [] for name in segment_functions}
    # The headline rows next to each other in every round, so that their per-round ratios compare
    # segments seconds apart (the machine's speed drifts over minutes).
    headline = [name for name in HEADLINE if name in segment_functions]
    names, round_probes = headline + [name for name in segment_functions if name not in headline], []
    for round_index in range(args.rounds):
        # In auto mode a round's 2-thread segments count only where probes right before and right after
        # the round find the second core free (a job can start mid-round).
        before = contention_probe() if two_thread_rows else None
        two_threads_now = two_thread_rows and (args.two_threads == "on" or not before["contended"])
        for name in names if round_index % 2 == 0 else reversed(names):
            if "2 thread" not in name or two_threads_now:
                segments[name].append({**segment_functions[name](), "round": round_index})
        after = contention_probe() if two_threads_now else None
        round_probes.append({"before": before, "after": after})
        stalled = two_threads_now and args.two_threads == "auto" and after["contended"]
        if stalled:
            for name in segments:
                segments[name] = [s for s in segments[name] if "2 thread" not in name or s["round"] != round_index]
        note = ", 2-thread rows skipped (core busy)" if two_thread_rows and not two_threads_now else (
            ", 2-thread segments dropped (core busy by the end of the round)" if stalled else "")
        print(f"round {round_index + 1}/{args.rounds} done at {time.perf_counter() - started:.0f} s, "
              f"load {load_average()}{note}", flush=True)
    load_after = load_average()
    segments = {name: parts for name, parts in segments.items() if parts}

    rows = {name: summarize(parts) for name, parts in segments.items()}
    sb3 = "SB3 SAC, 1 thread"
    for name, row in rows.items():
        if name.startswith("genpol SAC") and "update() only" not in name:
            row["x_sb3_1_thread_env_steps"] = ratio(rows, name, sb3, "env_steps")
            row["x_sb3_1_thread_gradient_steps"] = ratio(rows, name, sb3, "gradient_steps")
    # genpol's time as a multiple of the floor's, per gradient step (update() only, same threads):
    # the floor's rate over genpol's, per round
    floor_pairs = {}
    for name in rows:
        if name.startswith("genpol SAC") and name.endswith("update() only"):
            threads = "2" if "2 threads" in name else "1"
            for floor in (f"floor SAC step, baddbmm, {threads} thread(s)", floor_name("SAC step", int(threads))):
                floor_pairs[f"{name} vs {floor}"] = ratio(rows, floor, name, "gradient_steps")
    for threads in (1, 2):
        for impl in ("batched", "func", "onednn"):
            floor_pairs[f"E=10 update {impl} vs floor, {threads} thread(s)"] = ratio(
                rows, f"E=10 update, floor, {threads} thread(s)", f"E=10 update, {impl}, {threads} thread(s)",
                "gradient_steps")
    for threads, label in ((1, "1 thread"), (2, "2 threads")):
        for mode in ("eager", "compiled"):
            genpol_steps = f"genpol RLPD {mode}, {label}, 20 critic steps only"
            for floor in (f"floor RLPD critic step, baddbmm, {threads} thread(s)", floor_name("RLPD critic step", threads)):
                floor_pairs[f"RLPD critic step {mode}, {label} vs {floor}"] = ratio(rows, floor, genpol_steps,
                                                                                    "gradient_steps")
    implementations = {impl: [rows[f"E=10 update, {impl}, {t} thread(s)"]["ms_per_gradient_step"]
                              if f"E=10 update, {impl}, {t} thread(s)" in rows else None for t in (1, 2)]
                       for impl in ("batched", "func", "onednn")}
    winner = min(implementations, key=lambda impl: implementations[impl][0])
    runner_up = sorted(implementations, key=lambda impl: implementations[impl][0])[1]
    one_thread_cpu = [row["cpu_over_wall"] for name, row in rows.items() if "1 thread" in name]

    host = machine()
    out = {
        "benchmark": "sac_throughput", "env": ENV_ID, "date": date_stamp(),
        "torch": host["torch"], "threads": [1, 2], "onednn_available": ONEDNN_AVAILABLE,
        "machine": f"{host['arch']}, {host['cores']} cores", "cpu": host["cpu"], "cpu_model": cpu_model(),
        "settings": {"rounds": args.rounds, "sac_segment_env_steps": args.steps, "rlpd_segment_env_steps": args.rlpd_steps,
                     "learning_starts": LEARNING_STARTS, "batch": BATCH, "hidden": [HIDDEN, HIDDEN]},
        "load_average": {"before": load_before, "after_build": load_after_build, "after": load_after},
        "two_thread_probe": probe, "two_thread_round_probes": round_probes,
        "two_thread_rows": any("2 thread" in name for name in rows),
        "contention": {"median_cpu_over_wall_1_thread_rows": statistics.median(one_thread_cpu),
                       "note": "1-thread rows below ~0.9 shared their core with another job"},
        "reference": REFERENCE, "build_s": build_s, "genpol_critic_kernels_by_threads": MATCHED,
        "genpol_settings": {name: learner.settings for name, learner in learners.items() if hasattr(learner, "settings")},
        "genpol_time_over_floor_time": floor_pairs,
        "ensemble": {"ms_per_E10_update_1_and_2_threads": implementations, "winner": winner,
                     "winner_speedup_over_runner_up_1_thread": implementations[runner_up][0] / implementations[winner][0],
                     "runner_up": runner_up},
        "rows": rows, "total_s": time.perf_counter() - started,
    }
    path = write_results(args.out, out, indent=1)

    print("\n| row | ms / gradient step | gradient steps/s | env-steps/s | x SB3 (1 thread) | CPU/wall | rounds |")
    print("|---|---|---|---|---|---|---|")
    for name, row in rows.items():
        env_rate = f"{row['env_steps_per_s']:.1f}" if "env_steps_per_s" in row else ""
        versus = row.get("x_sb3_1_thread_env_steps")
        print(f"| {name} | {row['ms_per_gradient_step']:.2f} | {row['gradient_steps_per_s']:.1f} | {env_rate} | "
              f"{f'{versus:.2f}x' if versus else ''} | {row['cpu_over_wall']:.2f} | {row['rounds_measured']} |")
    if not out["two_thread_rows"] and probe is not None:
        print(f"\n2-thread rows left out: the second core was busy (bare step {probe['ms_1_thread']:.1f} ms at "
              f"1 thread, {probe['ms_2_threads']:.1f} ms at 2; load {probe['load_average']})")
    print("\n| comparison | genpol time / floor time |\n|---|---|")
    for name, value in floor_pairs.items():
        print(f"| {name} | {value:.2f} |" if value is not None else f"| {name} | n/a |")
    print(f"\nE=10 update winner: {winner}, {out['ensemble']['winner_speedup_over_runner_up_1_thread']:.2f}x faster "
          f"than {runner_up} at 1 thread; ms (1, 2 threads): {implementations}")
    print(f"load average: before {load_before}, after build {load_after_build}, after {load_after}; "
          f"total {out['total_s']:.0f} s\nwrote {path}")
    offline_dir.cleanup()


if __name__ == "__main__":
    main()

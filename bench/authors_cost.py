"""genpol's time per env step beside its authors' code, at the same settings, on this machine (issue 28,
"Cost beside the authors'"): RLPD, EXPO, DPPO and Consistency-AC.

What is timed is the learner's work per env step, never the simulator (env stepping is the same for both
sides and is left out), nor replay sampling (both sides get a fixed batch handed in, as the parity harnesses
hand it in; genpol's ``sampler.sample`` returns it, the authors' ``update`` / ``train`` take it):

* RLPD and EXPO (off-policy, one env): one env step is acting on one observation (genpol ``algorithm.act``,
  theirs ``agent.sample_actions``) plus one update with ``utd`` critic minibatches of 256 (genpol
  ``algorithm.update()``: one ``rlpd_round``; theirs the jitted ``agent.update(batch, utd_ratio)``, their
  training loop's call). The authors' JAX learner is built by the parity harness's ``their_learner``
  (``bench/parity/rlpd.py``, ``bench/parity/expo.py``) in float32 and runs in a second process with
  ``--jax-python`` (one XLA thread), which the main process drives line by line so that the sides alternate.
  genpol's learner: ``+experiment=rlpd`` (``learner.compile=true`` as configured, and an eager row) and
  ``+experiment=expo`` (as configured, and ``policy=diffusion_expo_authors``: the authors' base network), each
  with its critic step compiled (``learner.compile=true``, as configured since 2026-12-06) and eager.
* EXPO at the learning pair's CPU-sized setting (``--methods expo_pair``; ``bench/learning_parity.py``'s
  ``EXPO_CPU``: 2 LayerNorm critics of 256 x 2, both in the minimum, 4 base samples all edited, UTD 1, batch
  128): the same env step, their learner created with those arguments, genpol's ``+experiment=expo
  policy=diffusion_expo_authors`` with the pair's overrides, compiled (as configured) and eager (as the pair
  ran).
* Consistency-AC (off-policy, one env, the online settings of ``bench/parity/consistency_ac.py``: Ding &
  Jin's ``OnlineAgent``, L_Q alone, 2 sampling steps, twin Mish critics, gradient clip 1, and genpol's
  options for their behaviour, built by that harness's ``DingJin.agent`` and ``build_genpol``): one gradient
  step on a batch of 256 (theirs ``OnlineAgent.train(iterations=1)``, genpol ``update()`` at utd 1) plus
  acting on one observation (50 candidates and a softmax over the target critics' minimum on both sides).
* DPPO (on-policy; genpol ``+experiment=dppo_hopper``: 16 envs, 64 decisions per rollout, chunks of 4 actions,
  K = 20 / K' = 10 DDPM steps, denoiser and critic 3 x 256 Mish, 5 epochs of minibatches of 256): one
  rollout's learner work divided by its env steps (16 x 64 x 4): the 64 batched samplings of actions (genpol
  ``act`` with its ``compile_sampling`` as configured, theirs ``PPODiffusion.forward(return_chain=True)``),
  then the update (genpol ``compute_returns`` and ``update()``; theirs the lines of their
  ``train_ppo_diffusion_agent.py`` after a rollout: values and log-probs of the rollout's chains, GAE, and
  the epochs of ``loss``, ``backward``, clip, ``step``), their model built by ``bench/parity/dppo.py``'s
  ``their_model`` at genpol's widths.

Each side is warmed up first (jit / torch.compile / first-call costs excluded, reported as ``warmup_s``),
then the sides alternate (genpol, authors, genpol, authors, ...) for ``--repeats`` rounds; a round times
``--steps`` env steps of one side (DPPO: one rollout). Reported per side: the median ms per env step over
the rounds, the smallest and largest, the median CPU ms of the process (all its threads; far below wall:
another job held the core, and then the CPU ratio is the one to read), and genpol / authors of the medians,
of wall and of CPU time. Everything runs on one thread (torch, and XLA by its flags) and, on the CPU, on one
core: the process pins itself and so the JAX worker to it (jax 0.10 took a free second core despite its
flags; before 2026-12-06 the files were measured unpinned, with another job on the other core). The process sets
malloc's thresholds as genpol's entry points do (``genpol.allocator``; the torch references timed in it get
them too); ``GENPOL_MALLOC=default`` times glibc's defaults. The JSON records which (``malloc``).

    python bench/authors_cost.py --ref-rlpd /tmp/ref/rlpd --ref-expo /tmp/ref/EXPO --ref-dppo /tmp/ref/dppo \\
        --ref-ding-jin /tmp/ref/Consistency_Model_For_Reinforcement_Learning --jax-python /tmp/jaxvenv/bin/python
    python bench/authors_cost.py ... --methods rlpd dppo --device cuda   # on a GPU (gpu_check.sh)

A method whose ``--ref-*`` is not given is skipped. Writes ``bench/results/authors_cost.json`` (``--output``
to change the name): machine, date, snapshot commits, settings and one row per side, and prints a table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Callable

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(1, str(BENCH / "parity"))  # the harnesses' own imports (shared, expo_base)

OBS_DIM, ACT_DIM, BATCH = 11, 3, 256  # Hopper's sizes; every method's batch here
UTD = 20  # RLPD's and EXPO's recipes
ONE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def harness(name: str) -> ModuleType:
    """``bench/parity/<name>.py`` as the module ``parity_<name>``: the authors' own packages are called
    ``rlpd`` and ``expo``, so the harnesses are not imported under their file names."""
    module_name = f"parity_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, BENCH / "parity" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


def random_transitions(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``n`` float32 transitions as the harnesses draw them: observations N(0, 1), actions U(-0.99, 0.99),
    rewards N(0, 1), 20% terminal (``masks`` = 1 - terminal)."""
    return {"observations": rng.standard_normal((n, OBS_DIM)).astype(np.float32),
            "actions": rng.uniform(-0.99, 0.99, (n, ACT_DIM)).astype(np.float32),
            "rewards": rng.standard_normal(n).astype(np.float32),
            "masks": (rng.random(n) >= 0.2).astype(np.float32),
            "next_observations": rng.standard_normal((n, OBS_DIM)).astype(np.float32)}


def warm(unit: Callable[[], None], minimum: int = 3, most: int = 10) -> dict[str, Any]:
    """Call ``unit`` until the last two calls took within 1.5x of each other, ``minimum`` calls at least and
    ``most`` at the most: compilation (jit, torch.compile, and a retrace when a pytree's types settle after
    the first update: their RLPD compiles twice) is over. Returns the calls' count and total seconds."""
    times: list[float] = []
    while len(times) < most:
        start = time.perf_counter()
        unit()
        times.append(time.perf_counter() - start)
        if len(times) >= minimum and max(times[-2:]) < 1.5 * min(times[-2:]):
            break
    return {"warmup_s": sum(times), "warmup_calls": len(times)}


def clock(unit: Callable[[], None], count: int) -> tuple[float, float]:
    """(wall ms, process CPU ms) per call of ``unit`` over ``count`` calls."""
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        unit()
    return (time.perf_counter() - start) / count * 1000, (time.process_time() - cpu) / count * 1000


# =========================================================================== the authors' JAX side (worker)
def jax_worker(method: str, ref: Path, setting: dict[str, Any] | None = None) -> None:
    """Run by ``--jax-python``: build their learner, warm it up, then answer each line ``N`` on stdin with
    the JSON ``{"ms", "cpu_ms"}`` per env step of ``N`` env steps. Imports no torch and no genpol.
    ``setting`` (expo_pair): ``utd``, ``batch`` and their ``create``'s arguments to change."""
    out = os.fdopen(os.dup(1), "w")  # replies only; anything their code prints goes to stderr
    os.dup2(2, 1)
    import jax

    utd, batch_size = UTD, BATCH
    if method == "rlpd":
        agent, kwargs = harness("rlpd").their_learner(ref, OBS_DIM, ACT_DIM, x64=False)
    elif method == "expo":
        agent, kwargs = harness("expo").their_learner(ref, OBS_DIM, ACT_DIM, adjust_target_entropy=False, x64=False)
    else:  # expo_pair: as bench/run_reference_expo.py builds it for the learning pair
        expo = harness("expo")
        first, kwargs = expo.their_learner(ref, OBS_DIM, ACT_DIM, adjust_target_entropy=True, x64=False)
        kwargs.update({key: tuple(value) if isinstance(value, list) else value
                       for key, value in setting["create"].items()})
        agent = type(first).create(0, expo.GymBox(OBS_DIM), expo.GymBox(ACT_DIM), **kwargs)
        utd, batch_size = setting["utd"], setting["batch"]
    rng = np.random.default_rng(0)
    batch = random_transitions(batch_size * utd, rng)  # numpy, as their replay buffers hand it to update
    obs = rng.standard_normal(OBS_DIM).astype(np.float32)
    state = {"agent": agent}

    def env_step() -> None:  # their train_finetuning.py's loop, less the env and the replay
        action, state["agent"] = state["agent"].sample_actions(obs)
        np.asarray(action)
        state["agent"], _ = state["agent"].update(batch, utd)
        jax.block_until_ready(state["agent"])

    meta = {**warm(env_step), "device": str(jax.devices()[0]),
            "versions": {m: __import__(m).__version__ for m in ("jax", "flax", "optax", "numpy")},
            "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in kwargs.items()}}
    print(json.dumps(meta), file=out, flush=True)
    for line in sys.stdin:
        ms, cpu_ms = clock(env_step, int(line))
        print(json.dumps({"ms": ms, "cpu_ms": cpu_ms}), file=out, flush=True)


class JaxSide:
    """The authors' JAX learner in a ``--jax-python`` worker process, driven from here."""

    def __init__(self, method: str, ref: Path, jax_python: Path, device: str, setting: dict[str, Any] | None = None):
        env = {**os.environ, "PYTHONWARNINGS": "ignore", "TF_CPP_MIN_LOG_LEVEL": "3"}
        if device == "cpu":
            env.update(XLA_FLAGS=ONE_THREAD_XLA, JAX_PLATFORMS="cpu")
        else:  # jax's default backend (CUDA where it has it); torch shares the GPU
            env.update(XLA_PYTHON_CLIENT_PREALLOCATE="false")
        command = [str(jax_python), __file__, "--jax-worker", method, "--ref-jax", str(ref)]
        if setting is not None:
            command += ["--jax-setting", json.dumps(setting)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.meta = self._read()

    def _read(self) -> dict[str, Any]:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the JAX worker ended (exit code {self.process.wait()})")
        return json.loads(line)

    def measure(self, steps: int) -> tuple[float, float]:
        self.process.stdin.write(f"{steps}\n")
        self.process.stdin.flush()
        reply = self._read()
        return reply["ms"], reply["cpu_ms"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


# =========================================================================== sides in this process
class LocalSide:
    """A side that runs here: ``unit()`` is one env step's learner work (DPPO: one rollout's, divided by
    ``per_unit`` env steps), warmed up by ``warmup`` calls."""

    def __init__(self, unit: Callable[[], None], warmup: int = 3, per_unit: int = 1, meta: dict[str, Any] | None = None):
        self.unit, self.per_unit = unit, per_unit
        self.meta = {**warm(unit, warmup), **(meta or {})}

    def measure(self, steps: int) -> tuple[float, float]:
        ms, cpu_ms = clock(self.unit, steps)
        return ms / self.per_unit, cpu_ms / self.per_unit

    def close(self) -> None:
        pass


def genpol_off_policy(algo: Any, batch: Any, device: Any) -> Callable[[], None]:
    """genpol's env step of an off-policy learner: act on one observation, then ``update()`` on ``batch``
    (its sampler returns it: the replay is not timed)."""
    import torch

    algo.sampler.sample = lambda size: batch
    algo.env_steps = max(algo.env_steps, algo.cfg.learning_starts + 1)  # past the random-action phase
    obs = torch.randn(1, OBS_DIM, device=device)

    def unit() -> None:
        algo.act(obs)
        algo.update()
        if device.type == "cuda":
            torch.cuda.synchronize()

    return unit


def replay_batch(n: int, device: Any) -> Any:
    import torch

    from genpol.storage.replay import ReplayBatch

    data = {k: torch.from_numpy(v).to(device) for k, v in random_transitions(n, np.random.default_rng(1)).items()}
    return ReplayBatch(obs=data["observations"], actions=data["actions"], rewards=data["rewards"],
                       next_obs=data["next_observations"], dones=1 - data["masks"])


def rlpd_sides(args: argparse.Namespace, device: Any) -> list[tuple[str, Any]]:
    rlpd = harness("rlpd")
    sides = []
    for compiled in (True, False):
        algo = rlpd.genpol_learner(UTD, 0, [f"learner.compile={str(compiled).lower()}"], device=device.type)
        label = "genpol, +experiment=rlpd (learner.compile=true, as configured)" if compiled else \
            "genpol, +experiment=rlpd learner.compile=false (eager)"
        sides.append((label, lambda a=algo: LocalSide(genpol_off_policy(a, replay_batch(BATCH * UTD, device), device))))
    sides.append(("authors (ikostrikov/rlpd, JAX jit)",
                  lambda: JaxSide("rlpd", args.ref_rlpd, args.jax_python, args.device)))
    return sides


def expo_sides(args: argparse.Namespace, device: Any) -> list[tuple[str, Any]]:
    import torch

    from genpol.algorithms.expo import EXPO
    from genpol.build import make_head

    expo = harness("expo")
    sides = []
    for overrides, label in (([], "genpol, +experiment=expo (as configured: DPPO residual-MLP base, compiled)"),
                             (["learner.compile=false"], "genpol, +experiment=expo learner.compile=false (eager)"),
                             (["policy=diffusion_expo_authors"],
                              "genpol, +experiment=expo policy=diffusion_expo_authors (their base network, compiled)"),
                             (["policy=diffusion_expo_authors", "learner.compile=false"],
                              "genpol, +experiment=expo policy=diffusion_expo_authors learner.compile=false")):
        def build(overrides: list[str] = overrides) -> LocalSide:
            cfg = expo.genpol_config(UTD, overrides)
            torch.manual_seed(0)
            head = make_head(cfg.policy, OBS_DIM, ACT_DIM).to(device)
            algo = EXPO(head, cfg.learner, num_envs=1, obs_dim=OBS_DIM, act_dim=ACT_DIM,
                        capacity=cfg.learner.buffer_size, device=device, seed=0)
            return LocalSide(genpol_off_policy(algo, replay_batch(BATCH * UTD, device), device),
                             meta={"compile": cfg.learner.compile})
        sides.append((label, build))
    sides.append(("authors (Servo97/EXPO, JAX jit)", lambda: JaxSide("expo", args.ref_expo, args.jax_python, args.device)))
    return sides


def expo_pair_setting() -> dict[str, Any]:
    """The EXPO learning pair's CPU-sized setting (``learning_parity.EXPO_CPU``) for both sides."""
    from learning_parity import EXPO_CPU as c

    hidden = ",".join(str(width) for width in c["hidden"])
    return {"utd": c["utd"], "batch": c["batch_size"],
            "create": {"num_qs": c["num_qs"], "num_min_qs": c["num_min_qs"], "hidden_dims": c["hidden"],
                       "N": c["samples"], "n_edit_samples": c["samples"]},
            "genpol": ["policy=diffusion_expo_authors", "learner.base_weight_decay=1e-4",
                       f"learner.batch_size={c['batch_size']}", f"learner.num_qs={c['num_qs']}",
                       f"learner.num_min_qs={c['num_min_qs']}", f"learner.critic_hidden_sizes=[{hidden}]",
                       f"learner.edit_hidden_sizes=[{hidden}]", f"learner.num_samples={c['samples']}",
                       f"learner.n_edit={c['samples']}"]}


def expo_pair_sides(args: argparse.Namespace, device: Any) -> list[tuple[str, Any]]:
    import torch

    from genpol.algorithms.expo import EXPO
    from genpol.build import make_head

    expo, setting = harness("expo"), expo_pair_setting()
    sides = []
    for compiled in (True, False):
        def build(compiled: bool = compiled) -> LocalSide:
            cfg = expo.genpol_config(setting["utd"], [*setting["genpol"], f"learner.compile={str(compiled).lower()}"])
            torch.manual_seed(0)
            head = make_head(cfg.policy, OBS_DIM, ACT_DIM).to(device)
            algo = EXPO(head, cfg.learner, num_envs=1, obs_dim=OBS_DIM, act_dim=ACT_DIM,
                        capacity=cfg.learner.buffer_size, device=device, seed=0)
            batch = replay_batch(setting["batch"] * setting["utd"], device)
            return LocalSide(genpol_off_policy(algo, batch, device), meta={"compile": compiled})
        label = ("genpol, the pair's setting, learner.compile=true (as +experiment=expo configures)" if compiled else
                 "genpol, the pair's setting, learner.compile=false (as the pair ran)")
        sides.append((label, build))
    sides.append(("authors (Servo97/EXPO, JAX jit), the pair's setting",
                  lambda: JaxSide("expo_pair", args.ref_expo, args.jax_python, args.device, setting)))
    return sides


def consistency_sides(args: argparse.Namespace, device: Any) -> list[tuple[str, Any]]:
    import torch

    cac = harness("consistency_ac")
    reference = cac.DingJin(args.ref_ding_jin.resolve())
    setting = cac.Setting("online", agent="online", bc=0.0)  # the harness's online row
    torch.manual_seed(0)
    agent = reference.agent(setting)
    model, _ = reference.networks(agent)
    algo, options = cac.build_genpol(setting, "ding", model, agent.critic, agent.critic_target)
    data = random_transitions(BATCH, np.random.default_rng(1))
    tensors = {k: torch.from_numpy(v) for k, v in data.items()}
    their_data = SimpleNamespace(observations=tensors["observations"], actions=tensors["actions"],
                                 next_observations=tensors["next_observations"],
                                 rewards=tensors["rewards"].unsqueeze(-1), dones=(1 - tensors["masks"]).unsqueeze(-1))
    replay = SimpleNamespace(sample=lambda size: their_data)
    writer = SimpleNamespace(add_scalar=lambda *a, **k: None)
    state = data["observations"][0]

    def theirs() -> None:  # their online.py's loop body: sample_action per env, train(iterations=1)
        agent.sample_action(state)
        agent.train(replay, iterations=1, batch_size=BATCH, log_writer=writer)

    return [("genpol, QGradientActor at the harness's online options (consistency_ac)",
             lambda: LocalSide(genpol_off_policy(algo, replay_batch(BATCH, device), device),
                               meta={"genpol_options": options})),
            ("authors (Ding & Jin OnlineAgent, torch)", lambda: LocalSide(theirs))]


# --------------------------------------------------------------------------- DPPO
def dppo_sides(args: argparse.Namespace, device: Any) -> list[tuple[str, Any]]:
    import torch

    from genpol.algorithms import make_algorithm
    from genpol.api import compose_config
    from genpol.build import env_stack, make_env, make_head
    from genpol.configure import validate

    dppo = harness("dppo")
    cfg = validate(compose_config(["+experiment=dppo_hopper", "run_dir=/tmp/unused", "dataset.path=/tmp/unused.hdf5",
                                   f"device={device.type}"]))
    n_envs, n_steps, learner, policy = cfg.env.num_envs, cfg.learner.rollout_steps, cfg.learner, cfg.policy
    env_steps = n_envs * n_steps * policy.act_steps
    settings = {"n_envs": n_envs, "decisions_per_env": n_steps, "act_steps": policy.act_steps,
                "horizon_steps": policy.horizon_steps, "denoising_steps": policy.denoising_steps,
                "ft_denoising_steps": policy.ft_denoising_steps, "hidden": policy.hidden_sizes,
                "critic_hidden": policy.critic_hidden_sizes, "epochs": learner.epochs,
                "minibatch_size": learner.minibatch_size, "env_steps_per_rollout": env_steps}

    def genpol_side(compile_sampling: bool) -> LocalSide:
        run_cfg = validate(compose_config(["+experiment=dppo_hopper", "run_dir=/tmp/unused",
                                           "dataset.path=/tmp/unused.hdf5", f"device={device.type}",
                                           f"pipeline.compile_sampling={str(compile_sampling).lower()}"]))
        torch.manual_seed(0)
        env = make_env(run_cfg.env, gamma=run_cfg.learner.gamma, seed=0, device=run_cfg.device,
                       stack=env_stack(run_cfg.policy))
        head = make_head(run_cfg.policy, env.obs_dim, env.act_dim).to(device)
        algo = make_algorithm(run_cfg, head, env, None)
        env.close()
        generator = torch.Generator().manual_seed(2)
        obs = [torch.randn(n_envs, OBS_DIM, generator=generator).to(device) for _ in range(n_steps + 1)]
        rewards = [torch.randn(n_envs, generator=generator).to(device) for _ in range(n_steps)]
        terminated = [(torch.rand(n_envs, generator=generator) < 0.01).to(device) for _ in range(n_steps)]
        no = torch.zeros(n_envs, dtype=torch.bool, device=device)

        def rollout() -> None:
            for t in range(n_steps):
                algo.act(obs[t])
                algo.process_env_step(obs[t], rewards[t], terminated[t], no, {"final_obs": obs[t + 1]})
            algo.compute_returns(obs[-1])
            algo.update()
            if device.type == "cuda":
                torch.cuda.synchronize()

        return LocalSide(rollout, per_unit=env_steps, meta={"compile_sampling": compile_sampling,
                                                                      "algorithm": type(algo).__name__})

    def their_side() -> LocalSide:
        theirs = dppo.load_theirs(args.ref_dppo.resolve())
        setting = dppo.Setting("cost", clip=learner.clip_range, clip_base=None, activation="Mish",
                               their_critic_residual=policy.critic_residual, float64_tables=False)
        torch.manual_seed(0)
        model = dppo.their_model(theirs, setting, width=policy.hidden_sizes[0],
                                 critic_width=policy.critic_hidden_sizes[0]).to(device)
        model.device = device
        actor_optimizer = torch.optim.AdamW(model.actor_ft.parameters(), lr=learner.lr, weight_decay=0)
        critic_optimizer = torch.optim.AdamW(model.critic.parameters(), lr=learner.critic_lr, weight_decay=0)
        generator = torch.Generator().manual_seed(2)
        obs_trajs = torch.randn(n_steps + 1, n_envs, 1, OBS_DIM, generator=generator).numpy()
        reward_trajs = torch.randn(n_steps, n_envs, generator=generator).numpy()
        terminated_trajs = (torch.rand(n_steps, n_envs, generator=generator) < 0.01).numpy().astype(np.float64)
        K, H, A = model.ft_denoising_steps, model.horizon_steps, model.action_dim
        gamma, lam, logprob_batch = learner.gamma, learner.gae_lambda, 10000  # their logprob_batch_size default
        shuffle = np.random.default_rng(0)

        def rollout() -> None:  # train_ppo_diffusion_agent.py's iteration, less the env and the logging
            chains_trajs = np.empty((n_steps, n_envs, K + 1, H, A))
            for step in range(n_steps):
                with torch.no_grad():
                    cond = {"state": torch.from_numpy(obs_trajs[step]).float().to(device)}
                    samples = model(cond=cond, deterministic=False, return_chain=True)
                    samples.trajectories.cpu().numpy()
                    chains_trajs[step] = samples.chains.cpu().numpy()
            with torch.no_grad():
                obs_k = torch.from_numpy(obs_trajs[:-1]).float().to(device).reshape(n_steps * n_envs, 1, OBS_DIM)
                values_trajs = np.concatenate([model.critic({"state": o}).cpu().numpy().flatten()
                                               for o in torch.split(obs_k, logprob_batch)]).reshape(n_steps, n_envs)
                chains_t = torch.from_numpy(chains_trajs).float().to(device).reshape(n_steps * n_envs, K + 1, H, A)
                logprobs = torch.cat([model.get_logprobs({"state": o}, c).reshape(-1, K, H, A)
                                      for o, c in zip(torch.split(obs_k, logprob_batch),
                                                      torch.split(chains_t, logprob_batch))])
                advantages = np.zeros_like(reward_trajs)
                last = 0
                for t in reversed(range(n_steps)):
                    next_values = (model.critic({"state": torch.from_numpy(obs_trajs[-1]).float().to(device)})
                                   .reshape(1, -1).cpu().numpy() if t == n_steps - 1 else values_trajs[t + 1])
                    nonterminal = 1.0 - terminated_trajs[t]
                    delta = reward_trajs[t] + gamma * next_values * nonterminal - values_trajs[t]
                    advantages[t] = last = delta + gamma * lam * nonterminal * last
                returns = advantages + values_trajs
            returns_k = torch.tensor(returns).float().to(device).reshape(-1)
            values_k = torch.tensor(values_trajs).float().to(device).reshape(-1)
            advantages_k = torch.tensor(advantages).float().to(device).reshape(-1)
            total = n_steps * n_envs
            inds = np.arange(total)
            for _ in range(learner.epochs):
                shuffle.shuffle(inds)
                for b in range(max(1, total // learner.minibatch_size)):
                    i = inds[b * learner.minibatch_size:(b + 1) * learner.minibatch_size]
                    pg, entropy, v, _, _, _, bc, _ = model.loss(
                        {"state": obs_k[i]}, chains_t[i], returns_k[i], values_k[i], advantages_k[i], logprobs[i],
                        use_bc_loss=False, reward_horizon=policy.act_steps)
                    loss = pg + entropy * 0.0 + v * 0.5 + bc * 0.0
                    actor_optimizer.zero_grad()
                    critic_optimizer.zero_grad()
                    loss.backward()
                    if learner.max_grad_norm is not None:  # their train.max_grad_norm, set to genpol's
                        torch.nn.utils.clip_grad_norm_(model.actor_ft.parameters(), learner.max_grad_norm)
                    actor_optimizer.step()
                    critic_optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize()

        return LocalSide(rollout, per_unit=env_steps)

    return [("genpol, +experiment=dppo_hopper (pipeline.compile_sampling=true, as configured)",
             lambda: genpol_side(True)),
            ("genpol, +experiment=dppo_hopper pipeline.compile_sampling=false", lambda: genpol_side(False)),
            ("authors (irom-lab/dppo, torch)", their_side)], settings


# =========================================================================== the comparison
METHODS = {"rlpd": ("ref_rlpd", "ikostrikov/rlpd"), "expo": ("ref_expo", "Servo97/EXPO"),
           "expo_pair": ("ref_expo", "Servo97/EXPO"),
           "dppo": ("ref_dppo", "irom-lab/dppo"),
           "consistency_ac": ("ref_ding_jin", "quantumiracle/Consistency_Model_For_Reinforcement_Learning")}


def compare(method: str, sides: list[tuple[str, Callable[[], Any]]], steps: int, repeats: int) -> list[dict[str, Any]]:
    """Build and warm up each side, then ``repeats`` rounds of ``steps`` env steps (units), sides alternating
    (the order reversed every other round); one row per side."""
    built = []
    for label, build in sides:
        print(f"[{method}] building and warming up: {label}", file=sys.stderr, flush=True)
        built.append((label, build()))
    timings: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in built}
    for round_index in range(repeats):
        order = built if round_index % 2 == 0 else built[::-1]
        for label, side in order:
            timings[label].append(side.measure(steps))
        print(f"[{method}] round {round_index + 1}/{repeats}: "
              + ", ".join(f"{timings[label][-1][0]:.2f}" for label, _ in built) + " ms per env step",
              file=sys.stderr, flush=True)
    for _, side in built:
        side.close()
    authors = statistics.median(ms for ms, _ in timings[built[-1][0]])
    authors_cpu = statistics.median(cpu for _, cpu in timings[built[-1][0]])
    rows = []
    for label, side in built:
        wall = [ms for ms, _ in timings[label]]
        median, cpu = statistics.median(wall), statistics.median(c for _, c in timings[label])
        rows.append({"method": method, "side": label, "ms_per_env_step": median, "min_ms": min(wall), "max_ms": max(wall),
                     "cpu_ms_per_env_step": cpu, "repeats": repeats, "units_per_repeat": steps, "rounds_ms": wall,
                     "rounds_cpu_ms": [c for _, c in timings[label]],
                     "genpol_over_authors": median / authors, "genpol_over_authors_cpu": cpu / authors_cpu, **side.meta})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref-rlpd", type=Path, help="a snapshot of ikostrikov/rlpd")
    parser.add_argument("--ref-expo", type=Path, help="a snapshot of Servo97/EXPO")
    parser.add_argument("--ref-dppo", type=Path, help="a snapshot of irom-lab/dppo")
    parser.add_argument("--ref-ding-jin", type=Path,
                        help="a snapshot of quantumiracle/Consistency_Model_For_Reinforcement_Learning")
    parser.add_argument("--jax-python", type=Path, default=Path("/tmp/jaxvenv/bin/python"),
                        help="a Python with jax, flax, optax, tensorflow-probability, ml_collections (RLPD, EXPO)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--repeats", type=int, default=7, help="alternating rounds per side")
    parser.add_argument("--steps", type=json.loads,
                        default={"rlpd": 3, "expo": 1, "expo_pair": 20, "dppo": 1, "consistency_ac": 20},
                        help='env steps per round, JSON by method (DPPO: rollouts), e.g. \'{"rlpd": 3}\'')
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="genpol's and the torch references' device; the JAX worker uses its default backend "
                             "on cuda (which may be the CPU: its row then says so)")
    parser.add_argument("--only", default=None,
                        help="time only genpol's sides whose label contains this text (and the authors'), e.g. "
                             "'diffusion_expo_authors' for EXPO at their base network")
    parser.add_argument("--output", default="authors_cost.json")
    parser.add_argument("--jax-worker", choices=["rlpd", "expo", "expo_pair"], help=argparse.SUPPRESS)
    parser.add_argument("--ref-jax", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--jax-setting", type=json.loads, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.jax_worker:
        jax_worker(args.jax_worker, args.ref_jax.resolve(), args.jax_setting)
        return

    import torch

    torch.set_num_threads(1)
    if args.device == "cpu":
        # one core for both sides (the JAX worker inherits it): XLA's flags above did not hold jax 0.10 to one
        # thread (a quiet 2-core machine: 3.8 s wall for 7.4 s of CPU per EXPO env step), so a free second core
        # went to their side alone
        args.core = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {args.core})
    from common import date_stamp, load_average, machine, write_results

    from genpol.allocator import retain_freed_memory

    # as genpol's entry points set it (GENPOL_MALLOC=default keeps glibc's defaults); process-wide, so the
    # torch references timed in this process (DPPO, Consistency-AC) run with it too
    args.malloc = "retain" if retain_freed_memory() else "glibc defaults"

    shared = harness("shared")
    device = torch.device(args.device)
    if args.device == "cuda" and "consistency_ac" in args.methods:
        args.methods.remove("consistency_ac")
        print("[consistency_ac] skipped on cuda: its harness builds both learners on the CPU", file=sys.stderr)
    steps = {"rlpd": 3, "expo": 1, "expo_pair": 20, "dppo": 1, "consistency_ac": 20, **args.steps}
    rows, commits, settings = [], {}, {}
    for method in args.methods:
        option, repository = METHODS[method]
        ref = getattr(args, option)
        if ref is None:
            print(f"[{method}] skipped: no --{option.replace('_', '-')}", file=sys.stderr)
            continue
        commits[repository] = shared.reference_commit(ref.resolve())
        builder = {"rlpd": rlpd_sides, "expo": expo_sides, "expo_pair": expo_pair_sides, "dppo": dppo_sides,
                   "consistency_ac": consistency_sides}
        sides = builder[method](args, device)
        if method == "dppo":
            sides, settings["dppo"] = sides
        if args.only is not None:  # the authors' side is the last; it stays
            sides = [side for side in sides[:-1] if args.only in side[0]] + sides[-1:]
        rows += compare(method, sides, steps[method], args.repeats)
        write_results(args.output, payload(args, rows, commits, settings, date_stamp, load_average, machine))
    print_table(rows)


def payload(args: argparse.Namespace, rows: list[dict[str, Any]], commits: dict[str, str],
            settings: dict[str, Any], date_stamp: Callable, load_average: Callable, machine: Callable) -> dict[str, Any]:
    return {"date": date_stamp(), "machine": machine(), "device": args.device, "load_average_1min": load_average(),
            "pinned_to_core": getattr(args, "core", None),
            "snapshots": commits, "malloc": args.malloc,
            "what": "learner work per env step (acting + updates), env stepping and replay sampling excluded (identical "
                    "for both sides); compile / jit warm-up excluded; median over alternating rounds",
            "settings": {"rlpd": {"num_qs": 10, "num_min_qs": 2, "utd": UTD, "batch": BATCH, "obs_dim": OBS_DIM,
                                  "act_dim": ACT_DIM, "dtype": "float32"},
                         "expo": {"utd": UTD, "batch": BATCH, "num_qs": 10, "num_min_qs": 2, "num_samples": 8,
                                  "n_edit": 8, "dtype": "float32"},
                         "consistency_ac": {"batch": BATCH, "utd": 1, "sampling_steps": 2, "act_candidates": 50,
                                            "dtype": "float32"},
                         "expo_pair": expo_pair_setting(), **settings},
            "rows": rows}


def print_table(rows: list[dict[str, Any]]) -> None:
    print("| method | side | ms / env step (median) | min - max | CPU ms | genpol / authors (wall, CPU) | repeats "
          "| warm-up s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        side = r["side"] + (f" [jax on {r['device']}]" if "device" in r else "")
        print(f"| {r['method']} | {side} | {r['ms_per_env_step']:.3f} | {r['min_ms']:.3f} - {r['max_ms']:.3f} "
              f"| {r['cpu_ms_per_env_step']:.3f} | {r['genpol_over_authors']:.2f}, {r['genpol_over_authors_cpu']:.2f} "
              f"| {r['repeats']} "
              f"| {r['warmup_s']:.1f} |")


if __name__ == "__main__":
    main()

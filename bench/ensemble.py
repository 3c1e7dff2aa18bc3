"""Cost of one Q-ensemble critic update: genpol's QEnsemble (batched weights, torch.func; eager and
torch.compile) against the bare batched-matmul floor, on this CPU.

One update is what SAC / RLPD do per critic step: forward on (s, a), MSE to a fixed random target
(shared by the heads), backward, one Adam step (``fused=True``). Sizes are HalfCheetah's: obs 17,
actions 6, batch 256, 256-256 ReLU heads; E = 2 (SAC's twin critics) and E = 10 (RLPD), each with and
without per-head LayerNorm. Rows:

* ``floor``: the same math on raw leaf tensors (``baddbmm`` + ReLU, hand-written loss, one fused Adam),
  without nn.Module: the target is a QEnsemble update within 1.2x of it;
* ``batched`` / ``func``: ``QEnsemble(impl=...)`` eager; ``+compile``: the whole update step under
  ``torch.compile`` (compile time reported; the compiled steps are rebuilt for each thread count,
  because inductor fixes its kernels' thread count at compile time);
* ``loop``: E separate ``nn.Sequential`` critics called one after another (what SB3 does), for reference.

The machine's speed drifts, so every round runs all rows of one configuration back to back, in
alternating order, and each row is quoted as the median over rounds of its time and of its ratio to the
floor measured in the same round. On these 2 shared cores a job on the second core stalls every 2-thread
parallel region (steps of 100+ ms): 2-thread rows slower than 1.5x their 1-thread time are marked
``stalled`` and left out of the summary ratios. Writes ``bench/results/ensemble.json``.

    python bench/ensemble.py [--rounds 7] [--steps 10] [--threads 1 2] [--no-compile]
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
import time
from typing import Callable

import torch
import torch.nn.functional as F

from genpol.qensemble import QEnsemble, critic_mlp

from common import date_stamp, load_average, machine, write_results

BATCH, OBS_DIM, ACT_DIM, HIDDEN, LR = 256, 17, 6, (256, 256), 3e-4
EAGER_ROWS = ("floor", "batched", "func", "loop")
COMPILED_ROWS = ("batched+compile", "func+compile")
# The figures (one thread, measured earlier on this machine type), for comparison.
REFERENCE_MS = {"twin critic (E=2) step, 1 thread": 4.2, "E=10 batched matmuls, 1 thread": 27.0,
                "E=10 batched matmuls, 2 threads": 14.0}


def data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A fixed batch: ``obs [B, 17], actions [B, 6], target [B]``."""
    generator = torch.Generator().manual_seed(0)
    return (torch.randn(BATCH, OBS_DIM, generator=generator), torch.rand(BATCH, ACT_DIM, generator=generator) * 2 - 1,
            torch.randn(BATCH, generator=generator))


def floor_step(num_qs: int, layer_norm: bool) -> Callable[[], None]:
    """The bare floor: leaf tensors ``weights [E, in, out]``, ``biases [E, 1, out]`` (and LayerNorm
    ``[E, 1, H]``), the forward written out, one fused Adam."""
    obs, actions, target = data()
    sizes = [OBS_DIM + ACT_DIM, *HIDDEN, 1]
    weights = [((torch.rand(num_qs, fan_in, fan_out) * 2 - 1) / math.sqrt(fan_in)).requires_grad_()
               for fan_in, fan_out in zip(sizes[:-1], sizes[1:])]
    biases = [torch.zeros(num_qs, 1, fan_out, requires_grad=True) for fan_out in sizes[1:]]
    scales = [torch.ones(num_qs, 1, size, requires_grad=True) for size in HIDDEN] if layer_norm else []
    shifts = [torch.zeros(num_qs, 1, size, requires_grad=True) for size in HIDDEN] if layer_norm else []
    optimizer = torch.optim.Adam(weights + biases + scales + shifts, lr=LR, fused=True)

    def step() -> None:
        hidden = torch.cat([obs, actions], dim=-1).expand(num_qs, BATCH, -1)
        for layer, (weight, bias) in enumerate(zip(weights, biases)):
            hidden = torch.baddbmm(bias, hidden, weight)
            if layer < len(HIDDEN):
                if layer_norm:
                    hidden = torch.addcmul(shifts[layer], F.layer_norm(hidden, hidden.shape[-1:]), scales[layer])
                hidden = torch.relu(hidden)
        loss = (hidden.squeeze(-1) - target).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def module_step(num_qs: int, layer_norm: bool, row: str) -> Callable[[], None]:
    """One critic update of ``QEnsemble`` (``row`` batched / func, +compile) or of E separate heads (loop)."""
    obs, actions, target = data()
    if row == "loop":
        heads = [critic_mlp(OBS_DIM + ACT_DIM, HIDDEN, layer_norm=layer_norm) for _ in range(num_qs)]
        parameters = [parameter for head in heads for parameter in head.parameters()]

        def forward() -> torch.Tensor:
            inputs = torch.cat([obs, actions], dim=-1)
            return torch.stack([head(inputs).squeeze(-1) for head in heads])
    else:
        ensemble = QEnsemble(OBS_DIM, ACT_DIM, num_qs, HIDDEN, layer_norm=layer_norm, impl=row.split("+")[0])
        parameters = list(ensemble.parameters())

        def forward() -> torch.Tensor:
            return ensemble(obs, actions)
    optimizer = torch.optim.Adam(parameters, lr=LR, fused=True)

    def step() -> None:
        loss = (forward() - target).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return torch.compile(step) if row.endswith("+compile") else step


def milliseconds_per_step(step: Callable[[], None], steps: int, max_seconds: float = 0.4) -> float:
    """Mean time of up to ``steps`` updates, cut short after ``max_seconds``: when another job takes the
    second core, a 2-thread step can stall for 100+ ms, and the median over rounds discards those anyway."""
    step()  # one untimed step: the allocator and Adam's state are warm
    start = time.perf_counter()
    done = 0
    while done < steps and (done < 1 or time.perf_counter() - start < max_seconds):
        step()
        done += 1
    return (time.perf_counter() - start) / done * 1e3


def run_threads(threads: int, rows: tuple[str, ...], rounds: int, steps: int,
                one_thread_floor: dict[tuple[int, bool], float]) -> list[dict]:
    """All configurations at one thread count; returns one result per (E, LayerNorm, row). A configuration
    whose floor runs 1.5x slower than on one thread after 2 rounds is stalled (see mark_stalls): it stops
    there rather than spend minutes on numbers that say nothing."""
    torch.set_num_threads(threads)
    torch._dynamo.reset()
    results = []
    for num_qs in (2, 10):
        for layer_norm in (False, True):
            built: dict[str, Callable[[], None]] = {}
            compile_s: dict[str, float] = {}
            for row in rows:
                start = time.perf_counter()
                built[row] = floor_step(num_qs, layer_norm) if row == "floor" else module_step(num_qs, layer_norm, row)
                for _ in range(2):  # a compiled step compiles forward, backward and Adam over its first calls
                    built[row]()
                compile_s[row] = time.perf_counter() - start
            times: dict[str, list[float]] = {row: [] for row in rows}
            for round_index in range(rounds):
                for row in rows if round_index % 2 == 0 else reversed(rows):
                    times[row].append(milliseconds_per_step(built[row], steps * 10 // num_qs))
                reference = one_thread_floor.get((num_qs, layer_norm))
                if round_index >= 1 and reference and statistics.median(times["floor"]) > 1.5 * reference:
                    break
            for row in rows:
                ratios = [row_ms / floor_ms for row_ms, floor_ms in zip(times[row], times["floor"])]
                results.append({"threads": threads, "num_qs": num_qs, "layer_norm": layer_norm, "row": row,
                                "ms": statistics.median(times[row]), "x_floor": statistics.median(ratios),
                                "ms_rounds": times[row],
                                "compile_s": compile_s[row] if row.endswith("+compile") else None})
                print(f"threads {threads}  E={num_qs:2d}  LN={'yes' if layer_norm else 'no ':3s}  {row:16s} "
                      f"{results[-1]['ms']:7.2f} ms  {results[-1]['x_floor']:.2f}x floor", flush=True)
    return results


def mark_stalls(results: list[dict]) -> None:
    """Flag multi-thread rows slower than 1.5x the same row on one thread: on 2 shared cores another job
    on the second core stalls every parallel region, and such a median says nothing about the code."""
    one_thread = {(r["num_qs"], r["layer_norm"], r["row"]): r["ms"] for r in results if r["threads"] == 1}
    for r in results:
        reference = one_thread.get((r["num_qs"], r["layer_norm"], r["row"]))
        r["stalled"] = r["threads"] > 1 and reference is not None and r["ms"] > 1.5 * reference


def ratio(results: list[dict], threads: int, slower: str, faster: str) -> float | None:
    """Geometric mean over the (E, LayerNorm) configurations at ``threads`` of x_floor(slower) / x_floor(faster)
    (per-round ratios to the floor measured next to them, so drift cancels); stalled configurations left out."""
    rows = {(r["num_qs"], r["layer_norm"], r["row"]): r for r in results if r["threads"] == threads}
    pairs = [(r["x_floor"], rows[key[:2] + (faster,)]["x_floor"]) for key, r in rows.items() if key[2] == slower
             and not any(rows[key[:2] + (row,)]["stalled"] for row in (slower, faster, "floor"))]
    return math.exp(statistics.fmean(math.log(a / b) for a, b in pairs)) if pairs else None


def summarize(results: list[dict], threads: int, compiled: bool) -> dict:
    floor_ms = {r["threads"]: r["ms"] for r in results if (r["num_qs"], r["layer_norm"], r["row"]) == (10, False, "floor")}
    summary = {"eager_func_over_batched": ratio(results, threads, "func", "batched"),
               "batched_over_floor": ratio(results, threads, "batched", "floor"),
               "func_over_floor": ratio(results, threads, "func", "floor"),
               "loop_over_batched": ratio(results, threads, "loop", "batched"),
               "floor_E10_speedup_over_1_thread": floor_ms[1] / floor_ms[threads] if 1 in floor_ms else None}
    if compiled:
        summary["compiled_func_over_compiled_batched"] = ratio(results, threads, "func+compile", "batched+compile")
        summary["compiled_batched_over_floor"] = ratio(results, threads, "batched+compile", "floor")
    summary["contended"] = summary["eager_func_over_batched"] is None
    summary["stalled_rows"] = sum(r["stalled"] for r in results if r["threads"] == threads)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10,
                        help="timed updates per row and round at E=10 (E=2: 5x as many, for a similar duration)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--no-compile", action="store_true")
    args = parser.parse_args()
    torch._dynamo.config.recompile_limit = 64  # every row compiles the same step code for another ensemble
    torch._dynamo.config.fail_on_recompile_limit_hit = True  # never time a silent eager fallback
    torch._logging.set_logs(dynamo=logging.ERROR)
    rows = EAGER_ROWS + (() if args.no_compile else COMPILED_ROWS)
    started = time.perf_counter()
    results, load = [], {}
    for threads in args.threads:
        before = load_average()
        one_thread_floor = {(r["num_qs"], r["layer_norm"]): r["ms"] for r in results
                            if r["threads"] == 1 and r["row"] == "floor"}
        results += run_threads(threads, rows, args.rounds, args.steps, one_thread_floor)
        load[threads] = {"before": before, "after": load_average()}
    mark_stalls(results)
    summaries = {threads: {**summarize(results, threads, not args.no_compile), "load_average": load[threads]}
                 for threads in args.threads}
    usable = [threads for threads, summary in summaries.items() if not summary["contended"]] or list(summaries)
    eager = math.exp(statistics.fmean(math.log(summaries[t]["eager_func_over_batched"]) for t in usable))
    winner = "batched" if eager >= 1 else "func"

    print("\n| threads | E | LayerNorm | row | ms / update | x floor | compile s |\n|---|---|---|---|---|---|---|")
    for r in results:
        compile_text = f"{r['compile_s']:.1f}" if r["compile_s"] is not None else ""
        print(f"| {r['threads']} | {r['num_qs']} | {'yes' if r['layer_norm'] else 'no'} | {r['row']} | "
              f"{r['ms']:.2f}{' (stalled)' if r['stalled'] else ''} | {r['x_floor']:.2f} | {compile_text} |")
    for threads, summary in summaries.items():
        print(f"\n{threads} thread(s)" + ("  CONTENDED: every configuration stalled; not used" if summary["contended"] else ""))
        for name, value in summary.items():
            print(f"  {name}: {value:.3f}" if isinstance(value, float) else f"  {name}: {value}")
    print("(ratios: geometric means over E and LayerNorm of the per-round ratios to the floor)")
    print(f"\nwinner: {winner} (eager func / batched = {eager:.3f}, geometric mean over configurations at "
          f"{usable} thread(s))")
    host = machine()
    out = {"benchmark": "ensemble", "date": date_stamp(), "torch": host["torch"], "cpu": host["cpu"],
           "threads": args.threads, "rounds": args.rounds, "steps_per_round_at_E10": args.steps,
           "batch": BATCH, "obs_dim": OBS_DIM, "act_dim": ACT_DIM, "hidden_sizes": list(HIDDEN),
           "optimizer": "Adam(fused=True)", "winner": winner, "eager_func_over_batched": eager,
           "winner_from_threads": usable, "summary": summaries, "reference_ms": REFERENCE_MS, "results": results,
           "total_s": time.perf_counter() - started}
    path = write_results("ensemble.json", out, indent=1)
    print(f"wrote {path} ({out['total_s']:.0f} s)")


if __name__ == "__main__":
    main()

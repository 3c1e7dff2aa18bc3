"""GoRL's two decoders on the distillation step alone: how well a decoder fitted by
``DecoderTraining`` (the pipeline's own fit) maps N(0, I) latents onto known action distributions.

Decoders: ``flow`` (CFM, 10 Euler steps), ``ddim`` (epsilon loss, 10 deterministic DDIM steps, as
built), and ``ddim-zero-snr`` (the same network and loss, but DDIM entered at diffusers' last cosine
timestep, abar = 2.4e-5, the design ``genpol.heads.latent_ddim`` rejects; measured here to show why).

Targets, given a 5-d state s ~ N(0, I), 3-d pre-tanh actions:
* ``gaussian``: a = 0.3 s[:3] + 0.5 xi. Reported: the std of a - 0.3 s[:3] (exact: 0.5) and the
  max |a| of 4000 decoded actions.
* ``bimodal``: a = +-1.5 (equal odds) + 0.1 xi per dimension. Reported: the fraction of decoded
  coordinates within 0.5 of either mode and within 0.5 of 0 (exact: ~1.0 and ~0).

    python bench/gorl_decoders.py [--seeds 0 1 2] [--epochs 20]   (~1 min on 2 CPU cores)
Writes ``bench/results/gorl_decoders.json``.
"""

from __future__ import annotations

import argparse
import time

import torch

from genpol.heads.latent import LatentDecoderHead
from genpol.pipelines.gorl.distill import DecoderTraining

from common import write_results

OBS_DIM, ACT_DIM, SAMPLES = 5, 3, 4096


def target(kind: str, obs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    noise = torch.randn(len(obs), ACT_DIM, generator=generator)
    if kind == "gaussian":
        return 0.3 * obs[:, :ACT_DIM] + 0.5 * noise
    sign = torch.randint(0, 2, (len(obs), ACT_DIM), generator=generator).float() * 2 - 1
    return 1.5 * sign + 0.1 * noise


def enter_at_zero_snr(head: LatentDecoderHead) -> None:
    """Sample from diffusers' own last cosine timestep (T timesteps, trailing spacing): the table
    ``DDIMSchedule`` drops."""
    from diffusers import DDIMScheduler

    schedule = head.schedule
    steps, total = len(schedule.timesteps), schedule.train_timesteps
    scheduler = DDIMScheduler(num_train_timesteps=total, beta_schedule="squaredcos_cap_v2", clip_sample=False,
                              set_alpha_to_one=True, timestep_spacing="trailing")
    scheduler.set_timesteps(steps)
    table = scheduler.alphas_cumprod.to(torch.float32)
    timesteps = scheduler.timesteps.long()
    previous = timesteps - total // steps
    schedule.alphas_cumprod = table
    schedule.timesteps = timesteps
    schedule.alpha_bar = table[timesteps]
    schedule.alpha_bar_prev = torch.where(previous >= 0, table[previous.clamp(min=0)], torch.ones(()))


def measure(decoder: str, kind: str, seed: int, epochs: int) -> dict[str, float]:
    torch.manual_seed(seed)
    head = LatentDecoderHead(OBS_DIM, ACT_DIM, hidden_sizes=(16,), decoder_hidden_sizes=(64, 64, 64, 64),
                             decoder="flow" if decoder == "flow" else "ddim")
    if decoder == "ddim-zero-snr":
        enter_at_zero_snr(head)
    generator = torch.Generator().manual_seed(seed)
    obs = torch.randn(SAMPLES, OBS_DIM, generator=generator)
    actions = target(kind, obs, generator)
    start = time.perf_counter()
    weights, report = DecoderTraining(epochs=epochs, batch_size=256, lr=3e-3, patience=epochs).fit(head, obs, actions,
                                                                                                    seed=seed)
    fit_s = time.perf_counter() - start
    head.load_decoder(weights)
    test_obs = torch.randn(4000, OBS_DIM, generator=generator)
    with torch.no_grad():
        out = head.decode(test_obs, torch.randn(4000, ACT_DIM, generator=generator))
    row = {"best_val_loss": report["best_val_loss"], "fit_s": fit_s, "max_abs": float(out.abs().max())}
    if kind == "gaussian":
        row["residual_std"] = float((out - 0.3 * test_obs[:, :ACT_DIM]).std())
    else:
        row["near_modes"] = float(((out.abs() - 1.5).abs() < 0.5).float().mean())
        row["near_zero"] = float((out.abs() < 0.5).float().mean())
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    for kind in ("gaussian", "bimodal"):
        for decoder in ("flow", "ddim", "ddim-zero-snr"):
            rows = [measure(decoder, kind, seed, args.epochs) for seed in args.seeds]
            results.setdefault(kind, {})[decoder] = rows
            keys = [k for k in rows[0] if k not in ("best_val_loss",)]
            summary = {k: round(sum(r[k] for r in rows) / len(rows), 3) for k in keys}
            print(f"{kind:9s} {decoder:14s} mean over seeds {args.seeds}: {summary}", flush=True)
    payload = {"epochs": args.epochs, "seeds": args.seeds, "samples": SAMPLES, "results": results}
    write_results("gorl_decoders.json", payload)


if __name__ == "__main__":
    main()

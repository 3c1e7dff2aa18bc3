"""The statistics of ``genpol.report``: the interval of a median over seeds, how often that interval holds the
true median, and the Student-t band of the learning curves.

The bootstrap's 95 % interval of a median over n seeds is a pair of the sorted values, ``[x_(j), x_(k)]`` (with
an even n its percentile ends can fall between two sorted values: they are widened outward to them). For
continuous returns such an interval holds the true median with probability
``P(j <= B < k)``, ``B ~ Binomial(n, 1/2)``, whatever the distribution (the order-statistic interval of the
median): 0.75 for 3 seeds' ``[min, max]``, 0.9375 for 5, 0.875 for 7 (the bootstrap then takes ``[x_(2), x_(6)]``).
The report prints that probability beside the interval, since "95 %" would overstate it below 6 seeds.
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np

__all__ = ["EXACT_BOOTSTRAP_MAX_SEEDS", "BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED", "bootstrap_median_ci",
           "median_interval_coverage", "t_interval"]

EXACT_BOOTSTRAP_MAX_SEEDS = 7
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0


def bootstrap_median_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Percentile-bootstrap interval of the median of ``values`` (see ``genpol.report``'s docstring).

    Exact up to ``EXACT_BOOTSTRAP_MAX_SEEDS`` values (all n^n resamples), else ``BOOTSTRAP_RESAMPLES``
    resamples from ``numpy.random.default_rng(BOOTSTRAP_SEED)``. The ends are values of ``values``: a percentile
    between two of them (an even n) is widened outward to the nearer one.
    """
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    if n == 0:
        raise ValueError("bootstrap_median_ci needs at least one value")
    if n <= EXACT_BOOTSTRAP_MAX_SEEDS:
        indices = np.array(list(itertools.product(range(n), repeat=n)))  # [n^n, n]
    else:
        indices = np.random.default_rng(BOOTSTRAP_SEED).integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))
    medians = np.median(values[indices], axis=1)
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(medians, [tail, 1.0 - tail], method="inverted_cdf")
    # an even resample's median lies between two sorted values, and so may an end: widened outward to the nearest
    # sorted values, the interval is a pair of them, whose probability median_interval_coverage gives exactly (6
    # seeds' [1.5, 5.5] of 1..6 printed 78 %, its inner pair's, for an interval that holds the median ~95 %)
    return float(values[values <= low].max()), float(values[values >= high].min())


def median_interval_coverage(values: Sequence[float], low: float, high: float) -> float:
    """The probability that ``[low, high]``, a pair of the sorted ``values`` ``[x_(j), x_(k)]``, holds the true
    median of the distribution they were drawn from (continuous): ``sum_{i=j}^{k-1} C(n, i) / 2^n``. 0 for one
    value; for tied values, the widest reading of the ranks."""
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    j = int((values < low).sum()) + 1  # the rank of the lower end
    k = int((values <= high).sum())  # of the upper end
    return sum(math.comb(n, i) for i in range(j, k)) / 2**n


def t_interval(samples: np.ndarray, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and Student-t interval over axis 0 of ``samples [n, T]``; with n = 1 the interval is the mean."""
    from scipy import stats

    n = samples.shape[0]
    mean = samples.mean(axis=0)
    if n < 2:
        return mean, mean, mean
    half = stats.t.ppf(0.5 + confidence / 2, df=n - 1) * samples.std(axis=0, ddof=1) / np.sqrt(n)
    return mean, mean - half, mean + half

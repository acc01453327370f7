# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The benchmark's statistics: the confidence interval on the speedup over repeated runs.

Private to the collection: not a public API, may change without notice.

Standard library only (no scipy on a controller or GPU host is assumed).

Why this interval: the speculative and the baseline arm run on two different starts of the server,
one after the other, so repeat i of one arm has nothing in common with repeat i of the other: the
repeats are NOT paired, and a paired t interval would pretend they are. Throughput is a rate, and
the question is a ratio, so the interval is a Welch t interval on the difference of the mean *log*
throughputs of the two arms (unequal variances, Welch-Satterthwaite degrees of freedom), turned
back into a ratio with exp(). It is the interval of the ratio of the arms' geometric-mean
throughputs. With 3 repeats per arm it is honest about how little 3 runs say (the t quantile for
~4 degrees of freedom is 2.8, not 1.96); a bootstrap over 3 repeats would look narrower than it is
(only 10 distinct resampled means per arm).
"""

from __future__ import annotations

import math

CONFIDENCE = 0.95
CI_METHOD = "welch-t-log-ratio"


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom (df may be fractional: Welch)."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (bisection on t_cdf; 0.975 at df 2 is 4.303)."""
    low, high = -1e3, 1e3
    for _iteration in range(200):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0


def _mean_var(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return mean, sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def speedup_interval(spec: list[float], baseline: list[float], *, confidence: float = CONFIDENCE
                     ) -> dict[str, float | int | str | None]:
    """The speedup (ratio of geometric-mean throughputs) and its interval from unpaired repeats.

    ``spec`` and ``baseline`` are the per-repeat output throughputs of one concurrency level.
    Bounds are None when an arm has fewer than 2 positive repeats (no spread to judge).
    """
    spec = [v for v in spec if v and v > 0]
    baseline = [v for v in baseline if v and v > 0]
    out = dict(ratio=None, low=None, high=None, confidence=confidence, method=CI_METHOD, df=None,
               repeats_spec=len(spec), repeats_baseline=len(baseline))
    if not spec or not baseline:
        return out
    log_s, log_b = [math.log(v) for v in spec], [math.log(v) for v in baseline]
    out["ratio"] = math.exp(sum(log_s) / len(log_s) - sum(log_b) / len(log_b))
    if len(spec) < 2 or len(baseline) < 2:
        return out
    (mean_s, var_s), (mean_b, var_b) = _mean_var(log_s), _mean_var(log_b)
    se_s, se_b = var_s / len(spec), var_b / len(baseline)
    diff = mean_s - mean_b
    if se_s + se_b == 0.0:
        out["low"] = out["high"] = math.exp(diff)
        out["df"] = float(len(spec) + len(baseline) - 2)
        return out
    df = (se_s + se_b) ** 2 / (se_s ** 2 / (len(spec) - 1) + se_b ** 2 / (len(baseline) - 1))
    half = t_quantile(0.5 + confidence / 2.0, df) * math.sqrt(se_s + se_b)
    out.update(low=math.exp(diff - half), high=math.exp(diff + half), df=df)
    return out

# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_bench_report's two plots: throughput per concurrency level, and the accept lengths.

Private to the collection: not a public API, may change without notice.

matplotlib is optional at import time (the module reports it missing with missing_required_lib);
it is imported inside ``write_plots`` with the Agg backend, so no display is ever needed.
"""

from __future__ import annotations

from typing import Any

PLOT_WIDTH, PLOT_HEIGHT, PLOT_DPI = 800, 500, 100


def write_plots(doc: dict[str, Any], paths: dict[str, Any]) -> None:
    """The two PNGs, PLOT_WIDTH x PLOT_HEIGHT pixels each. Raises ImportError without matplotlib."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")  # no display on a controller or in CI
    from matplotlib import pyplot  # pylint: disable=import-outside-toplevel

    size = (PLOT_WIDTH / float(PLOT_DPI), PLOT_HEIGHT / float(PLOT_DPI))
    suffix = " (stand-in: not GPU figures)" if doc["standin"] else ""
    _throughput(pyplot, doc, paths["throughput_png"], size, suffix)
    _accept_lengths(pyplot, doc, paths["accept_length_png"], size, suffix)


def _throughput(pyplot: Any, doc: dict[str, Any], path: str, size: tuple, suffix: str) -> None:
    """Output throughput vs concurrency, spec vs baseline, each level's speedup written on it."""
    fig, ax = pyplot.subplots(figsize=size, dpi=PLOT_DPI)
    try:
        for label, style in (("spec", "o-"), ("baseline", "s--")):
            run = doc["runs"].get(label)
            if not run:
                continue
            levels = sorted(run["levels"], key=lambda lvl: lvl["concurrency"])
            ax.plot([lvl["concurrency"] for lvl in levels], [lvl["output_throughput"] or 0 for lvl in levels], style,
                    label="speculative" if label == "spec" else "baseline (no speculative decoding)")
        for item in doc["speedup"]:
            if item["speedup"]:
                ax.annotate("%.2fx" % item["speedup"], (item["concurrency"], item["spec_output_throughput"]),
                            textcoords="offset points", xytext=(0, 8), ha="center", fontsize=8)
        concurrencies = sorted({lvl["concurrency"] for lvl in doc["runs"]["spec"]["levels"]})
        if len(concurrencies) > 1 and concurrencies[-1] / float(concurrencies[0]) >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(concurrencies)
        ax.set_xticklabels([str(c) for c in concurrencies])
        ax.set_xlabel("concurrent requests")
        ax.set_ylabel("output tokens / s")
        ax.set_title("%s: output throughput%s" % (doc["host"], suffix), fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize=8)
        # No bbox_inches="tight": the file must be exactly PLOT_WIDTH x PLOT_HEIGHT.
        fig.tight_layout()
        fig.savefig(path, dpi=PLOT_DPI, format="png")
    finally:
        pyplot.close(fig)


def _accept_lengths(pyplot: Any, doc: dict[str, Any], path: str, size: tuple, suffix: str) -> None:
    """The histogram of the speculative run's per-request accept lengths, its pooled mean marked."""
    fig, ax = pyplot.subplots(figsize=size, dpi=PLOT_DPI)
    try:
        spec = doc["runs"]["spec"]
        values = [r["accept_length"] for r in spec["records"] if r.get("ok") and r.get("accept_length") is not None]
        if values:
            low, high = 1.0, max(values)
            step = 0.25
            bins = [low + i * step for i in range(int((high - low) / step) + 2)]
            ax.hist(values, bins=bins, color="#4c72b0", edgecolor="white")
            mean = sum(r["output_tokens"] for r in spec["records"] if r.get("ok") and r.get("spec_verify_ct")) / float(
                sum(r["spec_verify_ct"] for r in spec["records"] if r.get("ok") and r.get("spec_verify_ct")) or 1)
            ax.axvline(mean, color="#c44e52", linestyle="--", label="mean (tokens / verify steps) %.2f" % mean)
            ax.legend(loc="best", fontsize=8)
            ax.set_xlabel("accept length (completion tokens / verify steps, per request)")
            ax.set_ylabel("requests")
        else:
            server_mean = [lvl.get("server_accept_length") for lvl in spec["levels"]
                           if lvl.get("server_accept_length") is not None]
            ax.text(0.5, 0.5, "no per-request accept lengths in this run%s" % (
                "\n(server mean %.2f)" % server_mean[-1] if server_mean else ""),
                ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
        ax.set_title("%s: speculative accept length%s" % (doc["host"], suffix), fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=PLOT_DPI, format="png")
    finally:
        pyplot.close(fig)

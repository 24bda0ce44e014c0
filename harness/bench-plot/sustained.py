"""Plot of a sustained run of .ci/bench-sync: commit-to-visible lag and the slot's WAL over time.

Usage: sustained.py RESULTS.json OUT.png (the JSON benchsync -sustained writes names its two CSV files).
"""
import csv
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def running_spans(samples):
    """(start, end) seconds of the samples during which an execution ran."""
    spans, start = [], None
    for s in samples:
        t = float(s["seconds"])
        if s["execution_running"] == "1" and start is None:
            start = t
        elif s["execution_running"] == "0" and start is not None:
            spans.append((start, t))
            start = None
    if start is not None:
        spans.append((start, float(samples[-1]["seconds"])))
    return spans


def main(results_path, out):
    with open(results_path) as f:
        r = json.load(f)
    samples = read_csv(r["samples_csv"])
    txs = read_csv(r["transactions_csv"])
    t = [float(s["seconds"]) for s in samples]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 6), dpi=80)
    for ax in (top, bottom):
        for a, b in running_spans(samples):
            ax.axvspan(a, b, color="tab:green", alpha=0.12, lw=0)
    top.scatter([float(x["commit_seconds"]) for x in txs], [float(x["visible_after_seconds"]) for x in txs],
                s=1, color="tab:blue", label="each transaction: commit to visible (at its commit)", rasterized=True)
    top.plot(t, [float(s["oldest_not_visible_seconds"]) for s in samples], color="tab:orange", lw=1,
             label="oldest commit not yet visible (age, each second)")
    top.axhline(r["commit_to_visible_p50_seconds"], color="grey", ls="--", lw=0.8,
                label=f"p50 {r['commit_to_visible_p50_seconds']:.1f} s, p99 {r['commit_to_visible_p99_seconds']:.1f} s")
    top.axhline(r["commit_to_visible_p99_seconds"], color="grey", ls=":", lw=0.8)
    top.set_ylabel("lag (s)")
    top.legend(loc="upper left", fontsize=8)
    top.set_title(f"cdc sync, sustained: {r['writer_changes_per_s']:.0f} changes/s written; executions every "
                  f"{r['period']} (green: one running), CDC_MAX_DURATION {r['cdc_max_duration']}", fontsize=10)
    bottom.plot(t, [max(int(s["retained_wal_bytes"]), 0) / 1e6 for s in samples], color="tab:red", lw=1,
                label="retained WAL (current − restart_lsn)")
    bottom.plot(t, [max(int(s["slot_lag_bytes"]), 0) / 1e6 for s in samples], color="tab:purple", lw=1,
                label="slot lag (current − confirmed_flush_lsn)")
    bottom.set_ylabel("MB")
    bottom.set_xlabel(f"seconds since the writer's start ({r['date']}, {r['cpus']} CPUs, load {r['load_after']})")
    bottom.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

#!/usr/bin/env python3
"""Renders bench/results/*.json as PNG charts and as the table between the
`<!-- bench:begin -->` and `<!-- bench:end -->` markers of README.md."""
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def load(name):
    p = RESULTS / f"{name}.json"
    return json.loads(p.read_text()) if p.exists() else None


def charts(open_doc, convert_doc):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no charts")
        return
    if open_doc:
        res = open_doc["results"]
        fig, ax = plt.subplots(figsize=(7, 2.6))
        names = list(res)
        ax.barh(names, [res[n]["median"] * 1e3 for n in names], color=["#2a7", "#999"])
        ax.axvline(open_doc["target_ms"], color="r", ls="--", label=f"target {open_doc['target_ms']} ms")
        ax.set_xlabel(f"ms to open {open_doc['tensors']:,} tensors in {open_doc['shards']} shards (median)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(RESULTS / "open.png", dpi=110)
        plt.close(fig)
    if convert_doc:
        fig, axes = plt.subplots(2, 1, figsize=(9, 6.2))
        for ax, mode in zip(axes, ("warm", "cold")):
            res = {k: v for k, v in convert_doc["results"][mode].items() if k != "ratios"}
            names = list(res)
            ax.barh(names, [res[n]["gb_per_s"] for n in names],
                    color=["#2a7" if n.startswith("ckpt") else "#999" for n in names])
            for i, n in enumerate(names):
                ax.text(res[n]["gb_per_s"], i, f" {res[n]['peak_rss_bytes'] / 2**20:,.0f} MiB RSS", va="center",
                        fontsize=8)
            ax.set_title(f"{convert_doc['bytes'] / 1e9:.1f} GB → {convert_doc['max_shard_size']} shards, {mode} cache")
            ax.set_xlabel("GB/s (median)")
        fig.tight_layout()
        fig.savefig(RESULTS / "convert.png", dpi=110)
        plt.close(fig)


def table(open_doc, convert_doc):
    lines = []
    if open_doc:
        m = open_doc["machine"]
        lines.append(f"Machine: {m.get('cpu', '?')}, {m.get('cpus')} CPUs, {m.get('mem_gib')} GiB, "
                     f"{m.get('data_fs', '?')}; {m.get('ckpt')}, safetensors {m.get('safetensors')}, "
                     f"huggingface_hub {m.get('huggingface_hub')}, torch {m.get('torch')}.")
        lines.append("")
        lines.append(f"**Open a sharded checkpoint of {open_doc['tensors']:,} tensors** (metadata only, warm, "
                     f"median of {len(open_doc['results']['ckpt']['runs'])}; target < {open_doc['target_ms']} ms)")
        lines.append("")
        lines.append("| contender | median | min–max |")
        lines.append("|---|---:|---:|")
        for k, v in open_doc["results"].items():
            lines.append(f"| {k} | {v['median'] * 1e3:.1f} ms | {v['min'] * 1e3:.1f}–{v['max'] * 1e3:.1f} ms |")
        lines.append("")
    if convert_doc:
        gb = convert_doc["bytes"] / 1e9
        lines.append(f"**Convert a {gb:.1f} GB Llama-shaped bf16 file into {convert_doc['max_shard_size']} shards** "
                     "(each contender in its own process, after `sync`; peak RSS from GNU time)")
        lines.append("")
        lines.append("| cache | contender | median | GB/s | min–max | peak RSS |")
        lines.append("|---|---|---:|---:|---:|---:|")
        for mode in ("warm", "cold"):
            for k, v in convert_doc["results"][mode].items():
                if k == "ratios":
                    continue
                lines.append(f"| {mode} | {k} | {v['median']:.2f} s | {v['gb_per_s']:.2f} | "
                             f"{v['min']:.2f}–{v['max']:.2f} s | {v['peak_rss_bytes'] / 2**20:,.1f} MiB |")
        lines.append("")
        for mode in ("warm", "cold"):
            r = convert_doc["results"][mode]["ratios"]
            lines.append(f"- {mode}: ckpt convert runs at **{r['ckpt_vs_cp (no fsync)']:.0%}** of `cp`'s speed "
                         f"(neither syncing) and **{r['ckpt_vs_cp (fsync)']:.0%}** of `cp && sync` (both durable).")
        lines.append("")
    lines.append("Charts: `bench/results/open.png`, `bench/results/convert.png`; raw runs in `bench/results/*.json`.")
    return "\n".join(lines)


def main():
    open_doc, convert_doc = load("open"), load("convert")
    charts(open_doc, convert_doc)
    readme = ROOT / "README.md"
    text = readme.read_text()
    begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        readme.write_text(f"{head}{begin}\n{table(open_doc, convert_doc)}\n{end}{tail}")
        print("README table updated")


if __name__ == "__main__":
    main()

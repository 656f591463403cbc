#!/usr/bin/env python3
"""Renders bench/results/*.json as PNG charts (into build/bench-charts/, or
with --publish into bench/results/, to be committed), as the tables between
the `<!-- bench:begin -->` and `<!-- bench:end -->` markers of bench/README.md,
and as the figures between `<!-- fig:NAME -->` and `<!-- /fig -->` in
README.md, docs/*.md and bench/README.md.  Under each table, the line
`measured()` renders says when and at which commit its result was measured
and how to rerun it; a result listed in bench/suites.py's PENDING_RERUN is
marked stale wherever it is shown."""
import argparse
import json
import statistics
import re
from pathlib import Path

import suites

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
# Where charts go: a run of the suites renders them into this git-ignored
# folder, so that it leaves the committed PNGs alone; `make bench-publish`
# (report.py --publish) renders them into bench/results/, to be committed.
CHARTS = ROOT / "build" / "bench-charts"
# The pages it renders into: the README, the guides, and bench/README.md,
# which holds every table (between its bench markers).
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]

# The results read since it was last cleared: what the pages of DOCS render
# (tests/python/test_readme_figures.py checks that each is fresh).
USED = set()


def read(path):
    USED.add(path.stem)
    return json.loads(path.read_text())


def load(name):
    p = RESULTS / f"{name}.json"
    return read(p) if p.exists() else None


def measured(doc):
    """The line under a table: the commit and date its result was measured
    at, and how to rerun it; stale, with why, if it is knowingly not rerun."""
    prov = doc["provenance"]
    name = prov["measurement"]
    rerun = f'`make bench BENCH_ARGS="{suites.MEASUREMENTS[name].rerun}"`'
    if prov.get("code"):
        dirty = " with uncommitted changes" if prov.get("dirty") else ""
        at = f"Measured at `{prov['commit'][:10]}`{dirty} on {prov['date'][:10]}"
    else:
        at = (f"Recorded in `{prov['recorded_in'][:10]}` on {prov['date'][:10]}"
              + (f" (measured at `{prov['commit'][:10]}`)" if prov.get("commit") else "")
              + ", before results named the code they measured")
    line = f"*{at}; rerun: {rerun}.*"
    if name in suites.PENDING_RERUN:
        line = (f"**Stale: the code these figures describe has changed since they were measured, and they were not "
                f"rerun** ({suites.PENDING_RERUN[name]}). {line}")
    return [line, ""]


def stale_note(results):
    """What a figure in prose says of itself when a result it comes from is
    knowingly stale (bench/suites.py PENDING_RERUN); "" otherwise."""
    pending = sorted({suites.measurement_of(r) for r in results} & set(suites.PENDING_RERUN))
    if not pending:
        return ""
    return f" [stale: measured before later changes to its code; the {', '.join(pending)} suite not rerun]"


def cold_how(doc):
    """How the result's cold runs emptied the cache."""
    if doc["provenance"].get("cold") == "fadvise":
        return "the file's pages dropped (`POSIX_FADV_DONTNEED`) before each run"
    return "`drop_caches` before each run"


def save_chart(fig, name, dpi):
    """Writes a chart where CHARTS says: bench/results/ (committed; the README
    and bench/README.md show them) only when publishing, else build/bench-charts/."""
    CHARTS.mkdir(parents=True, exist_ok=True)
    fig.savefig(CHARTS / name, dpi=dpi)


def pyplot():
    """matplotlib's pyplot without a display, or None when it is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def charts(open_doc, convert_doc, name="convert"):
    plt = pyplot()
    if plt is None:
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
        save_chart(fig, "open.png", dpi=110)
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
        save_chart(fig, f"{name}.png", dpi=110)
        plt.close(fig)


def convert_table(doc, what):
    lines = []
    gb = doc["bytes"] / 1e9
    lines.append(f"**Convert a {gb:.1f} GB Llama-shaped bf16 {what} into {doc['max_shard_size']} safetensors shards** "
                 f"(each contender in its own process, after `sync`, alternating, median of "
                 f"{len(doc['results']['warm']['cp']['runs'])}; cold = {cold_how(doc)}; peak RSS from GNU time)")
    lines.append("")
    lines.append("| cache | contender | median | GB/s | min–max | peak RSS |")
    lines.append("|---|---|---:|---:|---:|---:|")
    for mode in ("warm", "cold"):
        for k, v in doc["results"][mode].items():
            if k == "ratios":
                continue
            lines.append(f"| {mode} | {k} | {v['median']:.2f} s | {v['gb_per_s']:.2f} | "
                         f"{v['min']:.2f}–{v['max']:.2f} s | {v['peak_rss_bytes'] / 2**20:,.1f} MiB |")
    lines.append("")
    for mode in ("warm", "cold"):
        r = doc["results"][mode]["ratios"]
        lines.append(f"- {mode}: ckpt convert runs at **{r['ckpt_vs_cp (no fsync)']:.0%}** of `cp`'s speed "
                     f"(neither syncing) and **{r['ckpt_vs_cp (fsync)']:.0%}** of `cp && sync` (both durable).")
    lines.append("")
    return lines + measured(doc)


def load_docs():
    order = {"bf16": 0, "sharded": 1, "f32": 2}
    docs = (read(p) for p in RESULTS.glob("load-*GB*.json"))
    return sorted(docs, key=lambda d: (round(d["bytes"] / 1e9), order.get(d.get("variant", "bf16"), 3)))


def load_chart(doc):
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.32 * len(doc["results"]["warm"]) + 1.5), sharey=True)
    for ax, mode in zip(axes, ("warm", "cold")):
        res = {k: v for k, v in doc["results"][mode].items() if v.get("gb_per_s")}
        names = list(res)
        colors = ["#2a7" if n.startswith("ckpt") else "#68c" if n.startswith("ceiling") else "#999" for n in names]
        ax.barh(names, [res[n]["gb_per_s"] for n in names], color=colors)
        for i, n in enumerate(names):
            ax.text(res[n]["gb_per_s"], i, f" {res[n]['peak_rss_bytes'] / 2**30:.2f} GiB", va="center", fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"load {doc['bytes'] / 1e9:.1f} GB, {mode} cache (GB/s, peak RSS)")
    fig.tight_layout()
    variant = doc.get("variant", "bf16")
    suffix = "" if variant == "bf16" else f"-{variant}"
    save_chart(fig, f"load-{round(doc['bytes'] / 1e9)}GB{suffix}.png", dpi=100)
    plt.close(fig)


def load_table(doc):
    gb = doc["bytes"] / 1e9
    ms = doc["machine_speeds"]
    what = {"sharded": ", in 1 GB shards", "f32": ", float32"}.get(doc.get("variant", "bf16"), "")
    lines = [f"**Load a {gb:.1f} GB Llama-shaped checkpoint{what} to CPU memory** ({doc['file']}, bf16 unless noted; "
             "every contender checksums every byte it loaded; own process each; median of "
             f"{doc['runs']}; cold = {cold_how(doc)})", "",
             "| contender | warm GB/s | warm peak RSS | cold GB/s | cold peak RSS |", "|---|---:|---:|---:|---:|"]
    for k, w in doc["results"]["warm"].items():
        c = doc["results"]["cold"].get(k, {})
        fmt = lambda v: f"{v['gb_per_s']:.2f}" if v.get("gb_per_s") else ("failed" if v.get("error") else "–")
        rss = lambda v: f"{v['peak_rss_bytes'] / 2**30:.2f} GiB" if v.get("peak_rss_bytes") else "–"
        lines.append(f"| {k} | {fmt(w)} | {rss(w)} | {fmt(c)} | {rss(c)} |")
    lines += ["", f"Machine, same run: memcpy {ms['memcpy']['gb_per_s']:.1f} GB/s, first touch of fresh memory "
              f"{ms['first_touch']['gb_per_s']:.2f} GB/s; cast kernels (output bytes) bf16→f32 "
              f"{ms['cast_bf16_to_f32']['gb_per_s']:.1f}, f32→bf16 {ms['cast_f32_to_bf16']['gb_per_s']:.1f}, "
              f"f16→f32 {ms['cast_f16_to_f32']['gb_per_s']:.1f}, f32→f16 {ms['cast_f32_to_f16']['gb_per_s']:.1f} GB/s.", ""]
    return lines + measured(doc)


def python_docs():
    return sorted((read(p) for p in RESULTS.glob("python-*GB.json")), key=lambda d: d["bytes"])


def python_table(doc):
    gb = doc["bytes"] / 1e9
    r = doc["results"]
    lines = [f"**`ckpt.torch.load_file` against `safetensors.torch.load_file` on a {gb:.1f} GB Llama-shaped bf16 file** "
             f"({doc['file']}; own process each, alternating, median of {doc['runs']}; every byte checksummed after "
             f"the load; cold = {cold_how(doc)}; `ckpt.load` and `load_into` are in the perf suite's table below)", "",
             "| contender | warm: dict returned | warm: load + checksum | cold: load + checksum | peak RSS |",
             "|---|---:|---:|---:|---:|"]
    for k, w in r["load_file"].items():
        c = r["load_file_cold"].get(k, {})
        lines.append(f"| {k} | {w['load_median'] * 1e3:.1f} ms | {w['median'] * 1e3:.0f} ms ({w['gb_per_s']:.1f} GB/s) | "
                     f"{c['median']:.2f} s ({c['gb_per_s']:.2f} GB/s) | {w['peak_rss_bytes'] / 2**30:.2f} GiB |")
    lines.append("")
    return lines + measured(doc)


def python_chart(doc):
    plt = pyplot()
    if plt is None:
        return
    r = doc["results"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 2.4))
    for ax, group, title in ((axes[0], "load_file", "warm load + checksum (s)"),
                             (axes[1], "load_file_cold", "cold load + checksum (s)")):
        names = list(r[group])
        ax.barh(names, [r[group][n]["median"] for n in names],
                color=["#2a7" if n.startswith("ckpt") else "#999" for n in names])
        ax.invert_yaxis()
        ax.set_title(title)
    fig.tight_layout()
    save_chart(fig, f"python-{round(doc['bytes'] / 1e9)}GB.png", dpi=100)
    plt.close(fig)


GGUF_CASES = {
    "to-gguf-bf16": "bf16 safetensors → GGUF BF16, {split} splits",
    "to-gguf-q8_0": "bf16 safetensors → GGUF Q8_0 (matrices), {split} splits",
    "q8_0-to-bf16": "GGUF Q8_0 → bf16 safetensors",
}


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def gguf_table(doc):
    """bench/gguf_bench.py: ckpt against gguf-py (and cp) per conversion."""
    gb = doc["source_bytes"] / 1e9
    lines = [f"**GGUF conversions of a {gb:.1f} GB Llama-shaped bf16 checkpoint** (bench/gguf_bench.py, gguf "
             f"{doc.get('gguf', '?')}; each contender in its own process, peak RSS from GNU time; outputs checked "
             "equal between ckpt and gguf-py)", "",
             "| conversion | cache | contender | median | runs | vs cp | peak RSS | same output |",
             "|---|---|---|---:|---:|---:|---:|---|"]
    for case, res in doc["cases"].items():
        title = GGUF_CASES.get(case, case).format(split=doc.get("split", "?"))
        for mode in ("warm", "cold"):
            cp = [r["seconds"] for r in res["runs"].get("cp", []) if r["mode"] == mode]
            for name, runs in res["runs"].items():
                xs = [r["seconds"] for r in runs if r["mode"] == mode]
                if not xs:
                    continue
                rss = res.get("peak_rss_gnu_time", {}).get(name) or max(r["peak_rss"] for r in runs if r["mode"] == mode)
                ratio = f"{_median(cp) / _median(xs):.2f}×" if cp and name != "cp" else ""
                lines.append(f"| {title} | {mode} | {name} | {_median(xs):.2f} s | {len(xs)} | {ratio} | "
                             f"{rss / 2**20:,.0f} MiB | {'yes' if res['identical_outputs'] else 'NO'} |")
                title = ""
    lines.append("")
    lines.append("vs cp: cp's time over the contender's (1.00× = as fast as copying the bytes)."
                 + (f" {doc['note']}" if doc.get("note") else ""))
    lines.append("")
    return lines + measured(doc)


def gguf_chart(doc):
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(len(doc["cases"]), 1, figsize=(8, 2.2 * len(doc["cases"])))
    for ax, (case, res) in zip(axes, doc["cases"].items()):
        names, vals = [], []
        for name, runs in res["runs"].items():
            for mode in ("warm", "cold"):
                xs = [r["seconds"] for r in runs if r["mode"] == mode]
                if xs:
                    names.append(f"{name} ({mode})")
                    vals.append(_median(xs))
        ax.barh(names, vals, color=["#2a7" if n.startswith("ckpt") else "#999" for n in names])
        ax.set_title(GGUF_CASES.get(case, case).format(split=doc.get("split", "?")), fontsize=9)
        ax.set_xlabel("seconds (median)")
    fig.tight_layout()
    save_chart(fig, "gguf.png", dpi=110)
    plt.close(fig)


def jax_docs():
    return sorted((read(p) for p in RESULTS.glob("jax-*GB.json")), key=lambda d: d["bytes"])


def jax_table(doc):
    gb = doc["bytes"] / 1e9
    r = doc["results"]
    arrays = next(iter(r["rows"].values()))["array_bytes"]
    lines = [f"**A {gb:.1f} GB Llama-shaped bf16 checkpoint onto {doc['devices']} CPU devices** ({doc['file']}; "
             "rows: 8x1 mesh, 2-D arrays `PartitionSpec('x', None)`; rect: 4x2 mesh, `PartitionSpec('x', 'y')`; "
             "1-D arrays replicated; own process each, median of "
             f"{doc['runs']}; every byte of every shard checksummed; peak RSS above the process's RSS once jax "
             f"has started, the arrays being {arrays / 2**30:.2f} GiB)", "",
             "| mesh | contender | warm load | cold load | peak RSS above start | process peak RSS |",
             "|---|---|---:|---:|---:|---:|"]
    for mesh in ("rows", "rect"):
        for k, w in r[mesh].items():
            c = r.get(f"{mesh}_cold", {}).get(k)
            cold = f"{c['load_median']:.2f} s" if c else "—"
            lines.append(f"| {mesh} | {k} | {w['load_median']:.2f} s | {cold} | "
                         f"{w['rss_over_base_bytes'] / 2**30:.2f} GiB ({w['rss_over_base_bytes'] / arrays:.2f}x) | "
                         f"{w['peak_rss_bytes'] / 2**30:.2f} GiB |")
    two = doc.get("two_processes", {})
    if two:
        lines += ["", "| two JAX processes, 4 devices each | process | bytes read | bytes its devices need | "
                  "file | peak RSS above start |", "|---|---:|---:|---:|---:|---:|"]
        for mesh, m in two.items():
            for d in m["per_process"]:
                lines.append(f"| {mesh} | {d['process']} | {d['bytes_read'] / 2**20:,.0f} MiB | "
                             f"{d['bytes_needed'] / 2**20:,.0f} MiB | {doc['bytes'] / 2**20:,.0f} MiB | "
                             f"{(d['rss_peak'] - d['rss_base']) / 2**30:.2f} GiB |")
    m = doc["machine"]
    lines += ["", f"jax {m.get('jax')}, flax {m.get('flax')}, orbax-checkpoint {m.get('orbax.checkpoint')}, "
              f"safetensors {m.get('safetensors')}.", ""]
    return lines + measured(doc)


def jax_chart(doc):
    plt = pyplot()
    if plt is None:
        return
    r = doc["results"]
    fig, axes = plt.subplots(1, 2, figsize=(14, 3.5))
    for ax, key, title in ((axes[0], "load_median", "warm load onto 8 devices (s)"),
                           (axes[1], "rss_over_base_bytes", "peak RSS above start (GiB)")):
        names, values, colors = [], [], []
        for mesh in ("rows", "rect"):
            for n, v in r[mesh].items():
                names.append(f"{mesh}: {n}")
                values.append(v[key] / (2**30 if key.endswith("bytes") else 1))
                colors.append("#2a7" if n.startswith("ckpt") else "#999")
        ax.barh(names, values, color=colors)
        ax.invert_yaxis()
        ax.set_title(title)
    fig.tight_layout()
    save_chart(fig, f"jax-{round(doc['bytes'] / 1e9)}GB.png", dpi=100)
    plt.close(fig)


def bindings_tables(doc):
    """The Rust and Elixir bindings (bench/bindings_suite.py)."""
    lines = []
    mib = 2**20
    rust = doc.get("rust")
    if rust:
        lines.append(f"**Rust binding: import a torchvision-shaped ResNet-152 torch file "
                     f"({rust['file_bytes'] / mib:,.0f} MiB, {rust['parameters'] / 1e6:.1f}M f32 parameters in "
                     f"{rust['tensors']} tensors) into typed `Vec`s** (`bindings/rust/examples/import_resnet.rs`, "
                     f"release, {rust.get('toolchain', 'cargo')}; own process each, every byte checksummed, median of "
                     f"{rust['runs']}; target: peak RSS ≤ file + 64 MiB)")
        lines.append("")
        lines.append("| cache | contender | median | of which checksum | peak RSS | RSS above the file |")
        lines.append("|---|---|---:|---:|---:|---:|")
        for mode in ("warm", "cold"):
            for k, v in rust["results"][mode].items():
                ck = f"{v['checksum_seconds']:.2f} s" if "checksum_seconds" in v else "—"
                lines.append(f"| {mode} | {k} | {v['median']:.2f} s | {ck} | {v['peak_rss_bytes'] / mib:,.1f} MiB | "
                             f"{v['rss_over_file_mib']:+,.1f} MiB |")
        lines.append("")
    ex = doc.get("elixir")
    if ex:
        gb = ex["data_bytes"] / 1e9
        lines.append(f"**Elixir binding: a {gb:.2f} GB nested parameter tree ({ex['tensors']} f32 tensors in maps, "
                     f"lists and tuples) saved with `Ckpt.save` as {ex['max_shard_size']} shards ({ex['files']} files) "
                     f"and loaded back with `Ckpt.load_tree`** (each phase in its own BEAM, "
                     f"{ex.get('toolchain', 'Elixir')}; median of {ex['runs']}; `:erlang.memory(:total)` sampled every "
                     "2 ms during the call; the loaded bytes are then all checksummed with `:erlang.crc32` and compared)")
        lines.append("")
        lines.append("| phase | median | + checksum of every byte | BEAM memory before → peak | peak RSS | "
                     "RSS after: anonymous / file pages |")
        lines.append("|---|---:|---:|---:|---:|---:|")
        for k, v in ex["results"].items():
            ck = f"{v['checksum_seconds']:.2f} s" if "checksum_seconds" in v else "—"
            beam = (f"{v['beam_total_before_bytes'] / mib:,.0f} → {v['beam_total_peak_bytes'] / mib:,.0f} MiB"
                    if "beam_total_peak_bytes" in v else "—")
            after = (f"{v['rss_anon'] / mib:,.0f} / {v['rss_file'] / mib:,.0f} MiB" if "rss_anon" in v else "—")
            lines.append(f"| {k} | {v['median']:.2f} s | {ck} | {beam} | {v['peak_rss_bytes'] / mib:,.0f} MiB | "
                         f"{after} |")
        lines.append("")
        lines.append(f"Data: {ex['data_bytes'] / mib:,.0f} MiB. Zero-copy binaries are the file's page-cache pages "
                     "(file RSS, shared, not BEAM memory); `copy: true` puts them in BEAM binaries.")
        lines.append("")
    return lines + measured(doc)


def bindings_chart(doc):
    plt = pyplot()
    if plt is None:
        return
    parts = [k for k in ("rust", "elixir") if doc.get(k)]
    if not parts:
        return
    fig, axes = plt.subplots(len(parts), 1, figsize=(9, 2.8 * len(parts)), squeeze=False)
    for ax, part in zip(axes[:, 0], parts):
        d = doc[part]
        if part == "rust":
            res = d["results"]["warm"]
            names = list(res)
            ax.barh(names, [res[n]["peak_rss_bytes"] / 2**20 for n in names],
                    color=["#2a7" if "ckpt" in n else "#999" for n in names])
            ax.axvline(d["file_bytes"] / 2**20, color="k", ls=":", label="file size")
            ax.axvline(d["file_bytes"] / 2**20 + 64, color="r", ls="--", label="target: file + 64 MiB")
            ax.set_xlabel("peak RSS, MiB (warm)")
            ax.set_title("Rust: ResNet-152 torch file into typed Vecs")
        else:
            res = d["results"]
            names = list(res)
            ax.barh(names, [res[n]["median"] + res[n].get("checksum_seconds", 0) for n in names],
                    color=["#999" if n.startswith("cp") else "#2a7" for n in names])
            ax.set_xlabel("seconds (median; loads include the checksum of every byte)")
            ax.set_title(f"Elixir: {d['data_bytes'] / 1e9:.2f} GB tree, save and load_tree")
        ax.legend() if part == "rust" else None
    fig.tight_layout()
    save_chart(fig, "bindings.png", dpi=110)
    plt.close(fig)


def baseline_chart(doc):
    plt = pyplot()
    if plt is None:
        return
    names = list(doc["results"])
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(names) + 1.2))
    ratios = [doc["results"][n]["time_after_over_before"] for n in names]
    ax.barh(names, ratios, color=["#2a7" if r <= 1.02 else "#c44" for r in ratios])
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel(f"time after / before (median; {doc['this']} vs {doc['baseline']})")
    ax.invert_yaxis()
    fig.tight_layout()
    save_chart(fig, "baseline.png", dpi=110)
    plt.close(fig)


def distributed_table(doc):
    """The distributed suite (bench/distributed_suite.py): TP load on N ranks,
    collective save, MPI simulation."""
    lines = []
    tp = doc.get("tp_load")
    if tp and tp.get("results"):
        lines += [f"**Many processes: tensor-parallel rank r of {tp['world']} (dim 0) of a "
                  f"{tp['bytes'] / 1e9:.1f} GB bf16 checkpoint** (gloo on 127.0.0.1, one process per rank, "
                  "slowest rank's wall time, every kept byte checksummed; median of "
                  f"{len(next(iter(tp['results']['warm'].values()))['runs'])})", "",
                  "| contender | cache | median | bytes read / needed per rank | received per rank | peak RSS per rank |",
                  "|---|---|---:|---:|---:|---:|"]
        for cache in ("warm", "cold"):
            for k, v in tp["results"].get(cache, {}).items():
                cells = []
                if v.get("read_over_needed"):
                    r = v["read_over_needed"]
                    cells.append(f"{min(r):.4f}–{max(r):.4f}")
                if v.get("disk_read_over_needed"):
                    r = v["disk_read_over_needed"]
                    cells.append(f"disk {min(r):.3f}–{max(r):.3f}")
                ratio = "; ".join(cells) or "–"
                rss = max(r["rss_peak"] for r in v["per_rank"]) / 2**20
                got = [r["bytes_received"] for r in v["per_rank"] if r.get("bytes_received") is not None]
                received = f"{max(got) / 2**20:,.2f} MiB" if got else "–"
                lines.append(f"| {k} | {cache} | {v['median']:.2f} s | {ratio} | {received} | {rss:,.0f} MiB |")
        lines.append("")
    sv = doc.get("save")
    if sv and sv.get("results"):
        lines += [f"**Collective save of {sv['gb']:g} GB** (each of {sv['world']} ranks holding its "
                  "tensor-parallel shards; output byte-identical between contenders; median of "
                  f"{len(next(iter(sv['results'].values()))['runs'])})", "",
                  "| contender | median | GB/s | own bytes per rank | peak RSS above own tensors |",
                  "|---|---:|---:|---:|---:|"]
        for k, v in sv["results"].items():
            own = max(r["bytes_own"] for r in v["per_rank"]) / 2**20
            above = max(0.0, max(r["rss_above_own_mib"] for r in v["per_rank"]))
            lines.append(f"| {k} | {v['median']:.2f} s | {v['gb_per_s']:.2f} | {own:,.0f} MiB | {above:,.0f} MiB |")
        lines.append("")
    sim = doc.get("mpi_sim")
    if sim and sim.get("rows"):
        lines += [f"**MPI simulation** (`mpirun --oversubscribe -np N` on 2 cores; {sim['tensors']:,} tensors in "
                  f"{sim['rows'][0]['files']} files; slowest rank, medians)", "",
                  "| ranks | every rank parses | rank 0 parses + broadcast | header bytes read (each / bcast) "
                  "| vote | 16 MiB save | files opened per rank |", "|---:|---:|---:|---:|---:|---:|---:|"]
        for r in sim["rows"]:
            lines.append(f"| {r['ranks']} | {r['open_each_s'] * 1e3:.1f} ms | {r['open_bcast_s'] * 1e3:.1f} ms | "
                         f"{r['header_bytes_read_each'] / 1e6:.1f} / {r['header_bytes_read_bcast'] / 1e6:.1f} MB | "
                         f"{r['vote_s'] * 1e3:.2f} ms | {r['save_s'] * 1e3:.1f} ms | {r['files_open_per_rank']} |")
        lines.append("")
    return lines


def dcp_table(doc):
    """The dcp suite: DCP (and its HF storage layer) into 1 GB shards."""
    gb = doc["bytes"] / 1e9
    lines = [f"**Convert a {gb:.1f} GB bf16 torch.distributed.checkpoint saved by {doc['ranks']} gloo ranks into "
             f"{doc['max_shard_size']} safetensors shards** ({doc['cache']}; median of "
             f"{len(doc['results']['dcp']['cp -r']['runs'])}, torch's ways once)", "",
             "| source | contender | median | GB/s | min–max | peak RSS |", "|---|---|---:|---:|---:|---:|"]
    for part, label in (("dcp", "DCP (`.distcp`)"), ("hf_layer", "HF storage layer")):
        for k, v in doc["results"][part].items():
            if k == "ratios":
                continue
            lines.append(f"| {label} | {k} | {v['median']:.2f} s | {gb / v['median']:.2f} | "
                         f"{v['min']:.2f}–{v['max']:.2f} s | {v['peak_rss_bytes'] / 2**20:,.1f} MiB |")
    r, h = doc["results"]["dcp"]["ratios"], doc["results"]["hf_layer"]["ratios"]
    lines += ["", f"- ckpt convert runs at **{r['ckpt_vs_cp (no fsync)']:.0%}** of `cp -r`'s speed "
                  f"({r['ckpt_vs_cp (fsync)']:.0%} with fsync against `cp -r && sync`); on the HF storage layer at "
                  f"{h['ckpt_vs_cp (no fsync)']:.0%} of `cp -r`, {h['ckpt_vs_consolidate']:.1f}x torch's "
                  "consolidate_safetensors_files.",
              f"- Checked: {doc.get('checked', '')}; HF layer: {doc.get('hf_layer_checked', '')}.", ""]
    return lines + measured(doc)


def dcp_chart(doc):
    plt = pyplot()
    if plt is None:
        return
    import textwrap
    fig, axes = plt.subplots(1, 2, figsize=(14, 3.8))
    for ax, part, title in ((axes[0], "dcp", "DCP → 1 GB shards"), (axes[1], "hf_layer", "HF storage layer → 1 GB shards")):
        res = {k: v for k, v in doc["results"][part].items() if k != "ratios"}
        names = list(res)
        ax.barh(["\n".join(textwrap.wrap(n, 28)) for n in names], [res[n]["median"] for n in names],
                xerr=[[res[n]["median"] - res[n]["min"] for n in names], [res[n]["max"] - res[n]["median"] for n in names]],
                color=["#2a7" if n.startswith("ckpt") else "#999" for n in names])
        for i, n in enumerate(names):
            ax.text(res[n]["median"], i, f"  {res[n]['peak_rss_bytes'] / 2**20:,.0f} MiB", va="center", fontsize=8)
        ax.set_xlabel("seconds (median, cold); label: peak RSS")
        ax.set_title(f"{doc['bytes'] / 1e9:.1f} GB bf16, {doc['ranks']} ranks: {title}", fontsize=10)
    fig.tight_layout()
    save_chart(fig, "dcp.png", dpi=110)
    plt.close(fig)


# ---- the sources suites (bench/sources_suite.py) ----

def sources_docs(kind):
    return [read(p) for p in sorted(RESULTS.glob(f"sources-{kind}-*GB.json"))]


def _pct(x):
    return f"{x:.0%}" if x is not None else "–"


def sources_http_table(doc):
    gb = doc["bytes"] / 1e9
    lines = [f"**A {gb:.1f} GB safetensors file over loopback HTTP and S3** ({doc['source']}; every loader "
             "checksums every byte; curl only counts them; own process each, alternating; median of "
             f"{len(next(v for v in doc['results']['warm'].values() if 'runs' in v)['runs'])}; "
             f"cold = {cold_how(doc)}, so the server reads the disk)", "",
             "| contender | warm GB/s | cold GB/s | peak RSS |", "|---|---:|---:|---:|"]
    warm, cold = doc["results"]["warm"], doc["results"]["cold"]
    for k, v in warm.items():
        if k == "ratios":
            continue
        c = cold.get(k, {})
        if "median" not in v:
            lines.append(f"| {k} | failed | failed | – |")
            continue
        lines.append(f"| {k} | {v['gb_per_s']:.2f} | {c.get('gb_per_s', float('nan')):.2f} | "
                     f"{v['peak_rss_bytes'] / 2**20:,.0f} MiB |")
    lines.append("")
    for mode in ("warm", "cold"):
        r = doc["results"][mode]["ratios"]
        lines.append(f"- {mode}: into pre-touched buffers ckpt over http:// runs at "
                     f"**{_pct(r.get('ckpt_http_pretouched_of_curl'))}** of curl's speed into /dev/null; into fresh "
                     f"buffers (first touch included) at {_pct(r.get('ckpt_http_of_curl'))}, and over s3:// at "
                     f"{_pct(r.get('ckpt_s3_of_curl'))}; on the same s3:// endpoint ckpt is "
                     f"**{r.get('ckpt_s3_over_runai') or float('nan'):.1f}×** as fast as Run:ai's streamer.")
    m = doc.get("moto")
    if m:
        mw = m["results"]["warm"]
        lines.append(f"- moto's S3 server itself (signatures, the S3 API), on a {m['bytes'] / 1e6:.0f} MB file (moto "
                     "copies the whole object for every request, range or not: larger files measure moto): " +
                     ", ".join(f"{k} {v['median']:.2f} s" for k, v in mw.items() if k != "ratios" and "median" in v) +
                     f" — ckpt {mw['ratios'].get('ckpt_s3_over_runai') or float('nan'):.1f}× Run:ai's speed.")
    lines.append(f"- Servers: {doc['servers']['http']}; s3://: {doc['servers']['s3']}.")
    lines.append("")
    return lines + measured(doc)


def sources_memlimit_table(doc):
    gb, lim = doc["bytes"] / 1e9, doc["limit_bytes"] / 1e9
    lines = [f"**Load and convert a {gb:.1f} GB checkpoint inside a {lim:.0f} GB memory cgroup** ({doc['cgroup']}; "
             f"cold, {cold_how(doc)}; the loads fill a model whose parameters are already allocated "
             "and touched, then checksum them; median of "
             f"{len(next(iter(doc['results'].values()))['runs'])})", "",
             "| contender | outcome | median | GB/s | of its ceiling | cgroup peak |",
             "|---|---|---:|---:|---:|---:|"]
    for k, v in doc["results"].items():
        outcome = ", ".join(sorted(set(v["status"])))
        ratio = doc["ratios"].get(k)
        lines.append(f"| {k} | {outcome} | {v['median']:.1f} s | {v['gb_per_s']:.2f} | {_pct(ratio)} | "
                     f"{v['peak_bytes'] / 2**30:.2f} GiB |")
    lines.append("")
    lines.append("- Loads are compared with the O_DIRECT read ceiling, converts (which read and write the whole "
                 "checkpoint on the same disk) with the `dd` copy; a contender whose cgroup peak is the limit "
                 "had the kernel reclaim its page cache as it went; OOM kills would show as the outcome.")
    lines.append("")
    return lines + measured(doc)


def sources_charts():
    plt = pyplot()
    if plt is None:
        return
    for doc in sources_docs("http"):
        fig, axes = plt.subplots(2, 1, figsize=(9, 5.5))
        for ax, mode in zip(axes, ("warm", "cold")):
            res = {k: v for k, v in doc["results"][mode].items() if k != "ratios" and "median" in v}
            names = list(res)
            ax.barh(names, [res[n]["gb_per_s"] for n in names],
                    color=["#2a7" if n.startswith("ckpt") else "#999" for n in names])
            ax.set_title(f"{doc['bytes'] / 1e9:.1f} GB over loopback, {mode}")
            ax.set_xlabel("GB/s (median)")
        fig.tight_layout()
        save_chart(fig, f"sources-http-{round(doc['bytes'] / 1e9)}GB.png", dpi=110)
        plt.close(fig)
    for doc in sources_docs("memlimit"):
        fig, ax = plt.subplots(figsize=(9, 3.4))
        res = doc["results"]
        names = list(res)
        ax.barh(names, [res[n]["median"] for n in names],
                color=["#2a7" if n.startswith("ckpt") and "direct" in n else "#999" for n in names])
        for i, n in enumerate(names):
            ax.text(res[n]["median"], i, f" {', '.join(sorted(set(res[n]['status'])))}, peak "
                    f"{res[n]['peak_bytes'] / 2**30:.1f} GiB", va="center", fontsize=8)
        ax.set_xlabel(f"seconds (median), {doc['bytes'] / 1e9:.0f} GB in a {doc['limit_bytes'] / 1e9:.0f} GB cgroup")
        fig.tight_layout()
        save_chart(fig, f"sources-memlimit-{round(doc['bytes'] / 1e9)}GB.png", dpi=110)
        plt.close(fig)


def open_table(doc):
    m = doc["machine"]
    return [f"Machine: {m.get('cpu', '?')}, {m.get('cpus')} CPUs, {m.get('mem_gib')} GiB, "
            f"{m.get('data_fs', '?')}; {m.get('ckpt')}, safetensors {m.get('safetensors')}, "
            f"huggingface_hub {m.get('huggingface_hub')}, torch {m.get('torch')}.", "",
            f"**Open a sharded checkpoint of {doc['tensors']:,} tensors** (metadata only, warm, "
            f"median of {len(doc['results']['ckpt']['runs'])}; target < {doc['target_ms']} ms)", "",
            "| contender | median | min–max |", "|---|---:|---:|",
            *(f"| {k} | {v['median'] * 1e3:.1f} ms | {v['min'] * 1e3:.1f}–{v['max'] * 1e3:.1f} ms |"
              for k, v in doc["results"].items()), ""] + measured(doc)


def torch_read_table(doc):
    lines = [f"**Read every tensor of a {doc['bytes'] / 1e6:.0f} MB ResNet-152-shaped torch file into owned "
             "buffers** (warm, all bytes checksummed, alternating, median of "
             f"{len(next(iter(doc['results'].values()))['runs'])})", "",
             "| contender | median | peak RSS | RSS above the data |", "|---|---:|---:|---:|"]
    for k, v in doc["results"].items():
        lines.append(f"| {k} | {v['median']:.2f} s | {v['peak_rss_bytes'] / 2**20:,.1f} MiB | "
                     f"{v['rss_over_file_mib']:+,.1f} MiB |")
    return lines + [""] + measured(doc)


def crc_table(doc):
    """The crc suite (bench/crc_suite.py): ZIP CRC-32s checked or not."""
    la = doc["load_average"]
    lines = [f"**What checking ZIP CRC-32s costs: a {doc['bytes'] / 1e9:.2f} GB Llama-style bf16 torch `.bin`, warm, "
             f"loaded and converted whole with the check on and off** (bench/crc_suite.py; each run in its own "
             f"process, checked and not alternating, median of {doc['runs']}; load average {la['min']:.0f}–"
             f"{la['max']:.0f} during the run)", "",
             "| case | checked | not checked | cost |", "|---|---:|---:|---:|"]
    for what, r in doc["results"].items():
        lines.append(f"| {what} | {_span(r['crc'])} | {_span(r['nocrc'])} | {r['cost']:+.0%} |")
    sp = doc["machine_speeds"]
    lines += ["", f"zlib {sp['zlib']}'s crc32, which ckpt replaces with a PCLMULQDQ fold on x86, runs at "
              f"{sp['zlib_crc32_gb_per_s']:.2f} GB/s here; memcpy at {sp['memcpy_gb_per_s']:.1f} GB/s.", ""]
    return lines + measured(doc)


def save_incremental_table(doc):
    """The save suite's incremental part (bench/save_worker.py incremental)."""
    lines = []
    for fs, r in doc["file_systems"].items():
        res = r["results"]
        full = res["ckpt.save full (checksums=True)"]
        lines += [f"**Incremental saves on {fs}: a {r['bytes'] / 1e9:.1f} GB bf16 state dict, {r['changed_tensors']} "
                  f"of its {r['tensors']} tensors changed since the base** (bench/save_worker.py; each call followed "
                  f"by os.sync() in the timed region; median of {doc['runs']}, alternating order)", "",
                  "| contender | time | vs ckpt's full save | bytes written | file system grew by |",
                  "|---|---:|---:|---:|---:|"]
        for name, v in res.items():
            t = statistics.median(v["seconds"])
            written = v["stats"]["written_bytes"] if "stats" in v else statistics.median(v["bytes"])
            lines.append(f"| {name} | {t:.2f} s | {t / statistics.median(full['seconds']):.0%} | "
                         f"{written / 1e9:.2f} GB | {statistics.median(v['blocks_gained']) / 1e9:.2f} GB |")
        if "XFS" in fs:
            inc = res["ckpt.save(base=) incremental"]["blocks_gained"]
            lines += ["", "XFS frees a removed file's blocks in the background, so the growth measured after the "
                      "previous contender's output was removed is not comparable between rounds; the first "
                      f"round's incremental save, on the fresh file system, grew it by {inc[0] / 1e9:.2f} GB."]
        lines.append("")
    return lines + measured(doc)


def save_background_table(doc):
    """The save suite's background part (bench/save_worker.py background)."""
    lines = []
    for world, ranks in doc["worlds"].items():
        r0 = ranks[0]
        lines += [f"**Background saves while training, {world}: {r0['bytes_per_rank'] / 1e9:.2f} GB per rank, a CPU "
                  f"loop modifying every parameter each step ({r0['step_s']:.2f} s a step alone)** "
                  f"(bench/save_worker.py; {doc['saves']} saves each; rank 0's figures, medians)", "",
                  "| contender | loop stalled per save | save to commit | extra memory (PSS) | staging kept |",
                  "|---|---:|---:|---:|---:|"]
        for kind, rows in r0["results"].items():
            kept = statistics.median(x.get("staged_bytes", 0) for x in rows)
            lines.append(f"| {kind} | {statistics.median(x['stall_s'] for x in rows):.3f} s | "
                         f"{statistics.median(x['total_s'] for x in rows):.2f} s | "
                         f"{statistics.median(x['extra_pss_bytes'] for x in rows) / 1e9:.2f} GB | "
                         f"{kept / 1e9:.2f} GB |")
        lines.append("")
    return lines + measured(doc)


def table():
    """bench/README.md's tables, between its bench markers."""
    lines = []
    for doc in load_docs():
        lines += load_table(doc)
    for doc in python_docs():
        if "load_file_cold" in doc["results"]:
            lines += python_table(doc)
    if load("perf"):
        lines += perf_table(load("perf"))
    for doc in jax_docs():
        lines += jax_table(doc)
    if load("open"):
        lines += open_table(load("open"))
    if load("convert"):
        lines += convert_table(load("convert"), "safetensors file")
    if load("torch_convert"):
        lines += convert_table(load("torch_convert"), "torch.save file (`.bin`)")
    if load("torch_read"):
        lines += torch_read_table(load("torch_read"))
    if load("crc"):
        lines += crc_table(load("crc"))
    if load("save-incremental"):
        lines += save_incremental_table(load("save-incremental"))
    if load("save-background"):
        lines += save_background_table(load("save-background"))
    if load("amplification"):
        lines += amplification_table(load("amplification"))
    if load("fuzz-journal"):
        lines += fuzz_journal_lines(load("fuzz-journal"))
    gguf_doc = load("gguf")
    if gguf_doc and "cases" in gguf_doc:
        lines += gguf_table(gguf_doc)
    if load("llamacpp-check"):
        lines += llamacpp_check_table(load("llamacpp-check"))
    if load("llamacpp-quantize-check"):
        lines += llamacpp_quantize_check_table(load("llamacpp-quantize-check"))
    for size in ("4GB", "1GB"):
        if load(f"llamacpp-{size}"):
            lines += llamacpp_table(load(f"llamacpp-{size}"))
    if load("bindings"):
        lines += bindings_tables(load("bindings"))
    if load("dcp"):
        lines += dcp_table(load("dcp"))
    for doc in sources_docs("http"):
        lines += sources_http_table(doc)
    for doc in sources_docs("memlimit"):
        lines += sources_memlimit_table(doc)
    lines.append("Many processes (tensor-parallel loads, collective saves, the MPI simulation): "
                 "[docs/DISTRIBUTED.md](../docs/DISTRIBUTED.md#measured).")
    lines.append("")
    charts = ", ".join(f"[{p.stem}](results/{p.name})" for p in sorted(RESULTS.glob("*.png")))
    lines.append(f"Charts (`make bench-publish` draws them): {charts}; raw runs in `bench/results/*.json`.")
    return "\n".join(lines)


# -------------------------------------------------------- llamacpp suite

LLAMACPP_TOKENIZERS = {"llama3": "Llama 3 BPE (`llama-bpe`)", "llama2": "Llama 2 SentencePiece",
                       "mistral": "SentencePiece (Mistral 7B v0.1's layout)", "qwen2": "Qwen2 BPE (`qwen2`)",
                       "qwen3": "Qwen2 BPE (`qwen2`)", "phi3": "SentencePiece + Phi-3's added tokens"}


def llamacpp_check_table(doc):
    """bench/llamacpp_suite.py's check: llama.cpp's tokens and logits on ckpt's files."""
    dtypes = list(doc["tolerance"])
    lines = [f"**llama.cpp runs ckpt's GGUF files** (llama.cpp from the {doc['llama_cpp']}; tiny random models of "
             f"each family, transformers {doc['transformers']} in float32 as the reference; logits error = "
             "max |llama.cpp − transformers| / max |transformers| over every position of the prompt; tolerance "
             "per type: " + ", ".join(f"{d.upper()} {t:.2g}" for d, t in doc["tolerance"].items()) + ")", "",
             "| family | tokenizer | tokens equal | " + " | ".join(f"{d.upper()} error" for d in dtypes) +
             " | top-1 agree (Q8_0) | wrong file (control) error |",
             "|---|---|---|" + "---:|" * len(dtypes) + "---:|---|"]
    for family, r in doc["families"].items():
        ok = sum(t["equal"] for t in r["tokens"])
        as_sp = sum(t["equal"] and not t["equal_hf"] for t in r["tokens"])
        controls = "; ".join(f"{k} {v['error']:.2g} ({'caught' if v['detected'] else 'MISSED'})"
                             for k, v in r["controls"].items())
        sp = f" ({as_sp} as SentencePiece's, not HF's)" if as_sp else ""
        lines.append(f"| {family} | {LLAMACPP_TOKENIZERS.get(family, '')} | {ok} of {len(r['tokens'])} texts{sp} | " +
                     " | ".join(f"{r['logits'][d]['error']:.1e}" + ("" if r["logits"][d]["pass"] else " FAIL")
                                for d in dtypes) +
                     f" | {r['logits']['q8_0']['top1_agree']:.0%} | {controls} |")
    lines += ["", f"Tolerance: {doc['tolerance_basis']}. Tokens: HF's tokenizer.json for SentencePiece models "
              "is a BPE converted from tokenizer.model, which splits runs of spaces otherwise than SentencePiece "
              "itself; there llama.cpp's ids are checked against SentencePiece's. "
              + ("Every check passed." if not doc["failures"] else "FAILED: " + "; ".join(doc["failures"])), ""]
    return lines + measured(doc)


def llamacpp_quantize_check_table(doc):
    """bench/llamacpp_suite.py's quantize-check: ckpt's mixes against llama-quantize's files."""
    mixes = doc["mixes"]
    lines = [f"**ckpt's llama-quantize mixes are llama-quantize's files** (llama.cpp from the {doc['llama_cpp']}; "
             f"reference: {doc['route']}; against `ckpt convert HF_DIR out.gguf --dtype MIX`; tensor types of "
             "llama-quantize's file in brackets)", "",
             "| model | " + " | ".join(m.upper() for m in mixes) + " |", "|---|" + "---|" * len(mixes)]
    for family, res in doc["families"].items():
        cells = []
        for m in mixes:
            r = res[m]
            types = ", ".join(f"{n} {k}" for k, n in sorted(r["types"].items()))
            cells.append(("identical" if r["identical"] else f"**differs** at byte {r['first_difference']} "
                          f"({r['where']})") + f" ({types})")
        lines.append(f"| {family} | " + " | ".join(cells) + " |")
    files = sum(len(r) for r in doc["families"].values())
    same = sum(r["identical"] for res in doc["families"].values() for r in res.values())
    c = doc["control"]
    lines += ["", f"{same} of {files} files identical. Control: {c['file']} — "
              f"{'caught' if c['caught'] else 'MISSED'} (first difference at byte {c.get('first_difference')}, "
              f"{c.get('where')}). " + ("Every check passed." if not doc["failures"] else
                                         "FAILED: " + "; ".join(doc["failures"])), ""]
    return lines + measured(doc)


LLAMACPP_CASES = {"bf16": "HF bf16 → GGUF BF16", "q8_0": "HF bf16 → GGUF Q8_0",
                  "Q4_K_M": "HF bf16 → Q4_K_M (llama-quantize: from the BF16 GGUF)"}


def llamacpp_table(doc):
    """bench/llamacpp_suite.py's measure: ckpt against convert_hf_to_gguf.py."""
    gb = doc["bytes"] / 1e9
    c = doc["config"]
    lines = [f"**HF → llama.cpp GGUF, a {gb:.1f} GB Llama 3-shaped bf16 model** (hidden {c['hidden_size']}, "
             f"{c['num_hidden_layers']} layers, vocabulary {c['vocab_size']:,}; each contender in its own process, "
             f"peak RSS from GNU time; median of {doc['runs']} for ckpt and cp, {doc['peer_runs']} for "
             f"convert_hf_to_gguf.py and llama-quantize; "
             + (f"cold = {cold_how(doc)}; " if any("cold" in m for m in doc["results"].values()) else
                "warm cache only; ") + f"load average "
             f"{doc['load_average']['min']:.1f}–{doc['load_average']['max']:.1f})", "",
             "| conversion | cache | contender | median | min–max | peer / contender | peak RSS |",
             "|---|---|---|---:|---:|---:|---:|"]
    for case, modes in doc["results"].items():
        title = LLAMACPP_CASES.get(case, case)
        if case in doc["identical_outputs"]:
            title += (" (the same file from both)" if doc["identical_outputs"][case] else
                      " (**files differ**)")
        for mode, res in modes.items():
            for name, v in res.items():
                if name in LLAMACPP_NOT_CONTENDERS:
                    continue
                sp = res.get("speedup", {}).get(name)
                lines.append(f"| {title} | {mode} | {name} | {v['median']:.2f} s | {v['min']:.2f}–{v['max']:.2f} s | "
                             f"{f'{sp:.1f}×' if sp else ''} | {_mib(v['peak_rss_bytes']):,.0f} MiB |")
                title = ""
    target = _mib(doc["rss_target_bytes"] + doc["largest_merged_group_bytes"])
    ckpt = [(case, mode, name, v) for case, modes in doc["results"].items() for mode, res in modes.items()
            for name, v in res.items() if name in ("ckpt convert", "ckpt convert --no-sync") and case != "Q4_K_M"]
    slowest = min(modes[mode]["speedup"][name] for case, mode, name, _ in ckpt
                  for modes in [doc["results"][case]] if "speedup" in modes[mode])
    peak = max(_mib(v["peak_rss_bytes"]) for *_, v in ckpt)
    raw = [_mib(v["peak_rss_bytes"]) for modes in doc["results"].values() for res in modes.values()
           for name, v in res.items() if name.endswith("--raw")]
    lines += ["", f"Targets (issue 29): ckpt ≥ 2× the script's speed — {'met' if slowest >= 2 else 'NOT met'}, "
              f"{slowest:.1f}× at the least; ckpt's peak RSS ≤ {target:.0f} MiB (64 MiB plus the largest group of "
              f"tensors the format forces to merge: none for llama) — {'met' if peak <= target else 'NOT met'}, "
              f"{peak:.0f} MiB" + (f" (the same tensors without llama.cpp's key-values, `--raw`: {max(raw):.0f} MiB; "
                                   "the rest comes with llama.cpp's key-values: Llama 3's tokenizer.json is 17 MB)" if raw else "") +
              ". " + llamacpp_q4_k_m_target(doc), ""]
    return lines + measured(doc)


# The entries of a case's results that are not contenders.
LLAMACPP_NOT_CONTENDERS = ("speedup", "speedup_route", "route_seconds")


def llamacpp_q4_k_m_target(doc):
    """The sentence on issue 29's Q4_K_M target: ckpt's HF → Q4_K_M at least
    as fast as llama-quantize from the BF16 GGUF."""
    q = doc["results"].get("Q4_K_M", {})
    if not any("ckpt convert --no-sync" in res for res in q.values()):
        # a run whose --llamacpp-cases left ckpt's Q4_K_M out (it takes minutes
        # per run at 4 GB): the 1 GB measure times it
        return ("Q4_K_M: not timed for ckpt in this run (`--llamacpp-cases`); the 1 GB measure below compares it "
                "with llama-quantize.")
    parts = []
    for mode, res in q.items():
        sp, route = res["speedup"], res.get("speedup_route", {})
        worst = min(sp["ckpt convert --no-sync"], sp["ckpt convert"])
        text = (f"{mode}: {'met' if worst >= 1 else 'NOT met'}, {worst:.1f}× at the least (with and without fsync)")
        if route:
            text += (f"; against llama.cpp's whole route from the HF directory (the script's BF16 file, then "
                     f"llama-quantize: {res['route_seconds']:.1f} s) {min(route['ckpt convert --no-sync'], route['ckpt convert']):.1f}×")
        scalar = next((k for k in sp if "scalar kernels" in k), None)
        if scalar:
            text += (f"; ckpt with its scalar quantizers (before their SIMD kernels) {sp[scalar]:.2f}×, the SIMD "
                     f"kernels {res[scalar]['median'] / res['ckpt convert --no-sync']['median']:.1f}× faster")
        parts.append(text)
    same = doc["identical_outputs"].get("Q4_K_M")
    return ("Q4_K_M (issue 29: ckpt's HF → Q4_K_M at least as fast as llama-quantize from the BF16 GGUF, same "
            "threads) — " + "; ".join(parts) + (". ckpt's Q4_K_M file is llama-quantize's, byte for byte" if same else
                                                 ". ckpt's Q4_K_M file **differs** from llama-quantize's") + ".")


def llamacpp_chart(doc):
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(len(doc["results"]), 1, figsize=(9, 2.4 * len(doc["results"])))
    for ax, (case, modes) in zip(axes, doc["results"].items()):
        names, vals, cols = [], [], []
        for mode, res in modes.items():
            for name, v in res.items():
                if name in LLAMACPP_NOT_CONTENDERS:
                    continue
                names.append(f"{name} ({mode})")
                vals.append(v["median"])
                cols.append("#2a7" if name.startswith("ckpt") else "#999")
        ax.barh(names, vals, color=cols)
        for i, n in enumerate(names):
            rss = modes[n.rsplit(" (", 1)[1][:-1]][n.rsplit(" (", 1)[0]]["peak_rss_bytes"]
            ax.text(vals[i], i, f" {_mib(rss):,.0f} MiB RSS", va="center", fontsize=7)
        ax.set_title(LLAMACPP_CASES.get(case, case) + f", {doc['bytes'] / 1e9:.1f} GB", fontsize=9)
        ax.set_xlabel("seconds (median)")
        ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    save_chart(fig, f"{doc['suite']}.png", dpi=110)
    plt.close(fig)


# -------------------------------------------------------- hardened suite

def amplification_table(doc):
    """Peak RSS of each amplifying input, this tree against the code before the bound."""
    trees = list(doc["results"])
    before = next((t for t in trees if t != "this tree"), None)
    lines = ["**Files built to amplify metadata** (tests/hostile/amplify.py; each process alone, peak RSS from GNU "
             f"time, the highest of {doc['runs']} rounds; the bound: 8 × the input + 64 MiB above the same process on a "
             f"tiny file{f'; before: `{before.split()[0]}`, main before the bound' if before else ''})", "",
             "| input | size | call | allowed peak | " + ("before | " if before else "") + "now | outcome now |",
             "|---|---:|---|---:|" + ("---:|" if before else "") + "---:|---|"]
    now = doc["results"]["this tree"]
    for call, res in now.items():
        for name, r in res.items():
            if name == "tiny":
                continue
            was = doc["results"][before][call][name] if before else None
            cells = [name, f"{r['bytes'] / 1e6:.1f} MB", call, f"{_mib(r['bound_bytes'] + res['tiny']['peak_rss_bytes']):.0f} MiB"]
            if was:
                cells.append(f"{_mib(was['peak_rss_bytes']):.0f} MiB ({was['outcome']})")
            cells += [f"{_mib(r['peak_rss_bytes']):.0f} MiB", f"{r['outcome']}{'' if r['within_bound'] else ', OVER THE BOUND'}"]
            lines.append("| " + " | ".join(cells) + " |")
    return lines + [""] + measured(doc)


def fuzz_journal_lines(doc):
    kinds = ", ".join(f"{k} {n}" for k, n in doc["artifacts_by_kind"].items())
    c0, c1 = doc["coverage_start"], doc["coverage_end"]
    return [f"**The commit journal's fuzz target** (`{doc['command']}`; {doc['clang']}; one process): "
            f"{doc['executions']:,} executions in {doc['seconds']} s from {doc['seeds']} seeds, coverage `cov: "
            f"{c0['cov']} ft: {c0['ft']}` → `cov: {c1['cov']} ft: {c1['ft']}`, {doc['new_units']:,} new units, peak RSS "
            f"{doc['peak_rss_mb']} MB; artifacts: {kinds}.", ""] + measured(doc)


# ------------------------------------------------------------ perf suite

PERF_TARGETS = [  # (ratio key in perf.json, target, what)
    ("load warm: ckpt.load (this tree) vs load_file", 0.9, "`ckpt.load(path)` warm vs `load_file`"),
    ("load cold: ckpt.load (this tree) vs load_file", 1.3, "`ckpt.load(path)` cold vs `load_file`"),
    ("f32 warm: ckpt.load(dtype=float32) (this tree) vs load_file + .to(float32)", 1.5,
     "`ckpt.load(path, dtype=\"float32\")` warm vs `load_file` + `.to(float32)`"),
    ("f32 cold: ckpt.load(dtype=float32) (this tree) vs load_file + .to(float32)", 1.5,
     "`ckpt.load(path, dtype=\"float32\")` cold vs `load_file` + `.to(float32)`"),
    ("tp dim 0 warm: ckpt.load (this tree) vs get_slice", 1.0, "rank 0 of 4, dim 0, warm vs `get_slice`"),
    ("tp dim 0 cold: ckpt.load (this tree) vs get_slice", 1.5, "rank 0 of 4, dim 0, cold vs `get_slice`"),
    ("tp dim 0 cold: bytes read / needed, ckpt (this tree)", -1.05, "rank 0 of 4, dim 0, cold: bytes read / needed"),
    ("tp dim 1 cold: ckpt.load (this tree) vs get_slice", 1.3, "rank 0 of 4, dim 1, cold vs `get_slice`"),
    ("big cold: ckpt.load_into(on_loaded) (this tree) vs Run:ai", 1.0,
     "cold single 8 GB file into touched tensors, each used as it lands (`on_loaded`), vs Run:ai's streamer"),
    ("big cold: ckpt.load_into (this tree) vs Run:ai", 1.0,
     "the same, used after the whole load"),
    ("open whole process: ckpt (this tree) vs index + safe_open + keys()", 1.3,
     "`ckpt.open` + `keys()`, whole Python process, vs index + `safe_open` + `keys()`"),
    ("open in process with shapes and dtypes: ckpt (this tree) vs safe_open", 2.0,
     "`ckpt.open` with shapes and dtypes, in process, vs `safe_open` + `get_slice`"),
]


def _fmt_s(x):
    return f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.2f} s"


def perf_table(doc):
    base = doc["baseline"]
    runs = doc["runs"]
    lines = [f"**The Python calls users make, on a {doc['bytes'] / 1e9:.1f} GB Llama-shaped bf16 file** "
             f"({doc['file']}; bench/perf_suite.py: this tree against `{base}` and safetensors; own process each, "
             f"alternating, median of {runs}; every byte returned is checksummed; cold = {cold_how(doc)}; "
             "bytes read in a cold run: the file's pages in the page cache after it — reads through the cache "
             "and mappings — and, in brackets, the device's bytes read during it, which include O_DIRECT reads and "
             "the Python modules the process loads)", "",
             "| group | contender | warm | cold | cold: bytes read | peak RSS |", "|---|---|---:|---:|---:|---:|"]
    for name, g in doc["results"].items():
        if name == "open":
            continue
        if name == "big":
            name = f"big ({doc.get('big_bytes', 0) / 1e9:.1f} GB file)"
        for label in g.get("warm") or g["cold"]:
            w, c = g.get("warm", {}).get(label, {}), g.get("cold", {}).get(label, {})
            read = f"{c['read_max_bytes'] / 2**20:,.0f} MiB" if c.get("read_max_bytes") else ""
            if c.get("read") and c.get("read_max_bytes", 0) < 16 << 20:
                read = "O_DIRECT: not in the cache"  # the device column has it
            elif c.get("read_over_needed"):
                read += f", {c['read_over_needed']:.2f}× needed"
            if c.get("device_read_median_bytes") is not None:
                read += f" ({c['device_read_median_bytes'] / 2**20:,.0f} MiB)"
            rss = max(w.get("peak_rss_bytes", 0), c.get("peak_rss_bytes", 0))
            extra = ""
            if w.get("rss_over_module_max_bytes") is not None:
                extra = (f" ({w['rss_over_module_max_bytes'] / 2**20:,.1f} / "
                         f"{c.get('rss_over_module_max_bytes', 0) / 2**20:,.1f} MiB above the module, warm / cold)")
            lines.append(f"| {name} | {label} | {_fmt_s(w['median']) if w else ''} | {_fmt_s(c['median']) if c else ''} | "
                         f"{read} | {rss / 2**30:.2f} GiB{extra} |")
    lines.append("")
    if "open" in doc["results"]:
        o = doc["results"]["open"]
        lines += ["| open 30,000 tensors in 8 shards | median | min–max |", "|---|---:|---:|"]
        for where, title in (("process", "whole Python process"), ("in_process", "in process")):
            for label, v in o[where].items():
                lines.append(f"| {title}: {label} | {v['median'] * 1e3:.1f} ms | "
                             f"{v['min'] * 1e3:.1f}–{v['max'] * 1e3:.1f} ms |")
        lines.append("")
    r = doc["ratios"]
    lines += [f"| measure (issue 13) | target | this tree | {base} |", "|---|---:|---:|---:|"]
    for key, target, what in PERF_TARGETS:
        if key not in r:
            continue
        before = r.get(key.replace("(this tree)", f"({base})"))
        if target < 0 and before is not None and before < 0.05:
            before = None  # O_DIRECT reads leave nothing in the cache to count
        if target < 0:
            t, ok = f"≤ {-target:.2f}×", r[key] <= -target
        else:
            t, ok = f"≥ {target:.1f}×", r[key] >= target
        lines.append(f"| {what} | {t} | {'**' if ok else ''}{r[key]:.2f}×{'**' if ok else ''} | "
                     f"{'—' if before is None else f'{before:.2f}×'} |")
    lines.append("")
    sp = doc["machine_speeds"]
    fmt = lambda s: (f"memcpy {s['memcpy']['gb_per_s']:.1f} GB/s, first touch of fresh memory "
                     f"{s['firsttouch']['gb_per_s']:.2f} GB/s, with 2 MiB alignment and MADV_HUGEPAGE "
                     f"{s['firsttouch_huge']['gb_per_s']:.2f} GB/s")
    after = f"; after it {fmt(sp['after'])}" if sp.get("after") else " (the run stopped before the end)"
    lines.append(f"Machine, same run: before it {fmt(sp['before'])}{after}. This tree: {doc.get('this_tree', '?')}. "
                 "Bold: target met. Ratios are the peer's median time over ckpt's.")
    lines.append("")
    return lines + measured(doc)


def perf_chart(doc):
    plt = pyplot()
    if plt is None:
        return
    groups = [g for g in doc["results"] if g != "open"]
    fig, axes = plt.subplots(len(groups), 1, figsize=(9, 1.6 + 1.3 * len(groups)), squeeze=False)
    for ax, name in zip(axes[:, 0], groups):
        g = doc["results"][name]
        labels = list(g.get("warm") or g["cold"])
        y = range(len(labels))
        if "warm" in g:
            ax.barh([i + 0.2 for i in y], [g["warm"][k]["median"] for k in labels], height=0.4, label="warm",
                    color="#2a7")
        if "cold" in g:
            ax.barh([i - 0.2 for i in y], [g["cold"][k]["median"] for k in labels], height=0.4, label="cold",
                    color="#27a")
        ax.set_yticks(list(y))
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("seconds (median), lower is better", fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_chart(fig, "perf.png", dpi=110)
    plt.close(fig)


# ------------------------------------------- figures in README and docs prose
# Every measured figure in the prose of the pages (DOCS) sits between
# `<!-- fig:NAME -->` and `<!-- /fig -->` and is rendered here from the JSON
# (tests/python/test_readme_figures.py checks both, and that no measured
# figure stands outside them).  FIGURES: {name: (results it reads, render)}.

FIGURES = {}


def figure(name, *results):
    """Registers render(*docs) as figure `name`, from bench/results/<results>.json."""
    def register(render):
        FIGURES[name] = (results, render)
        return render
    return register


def _mib(b):
    return b / 2**20


@figure("convert-peak", "convert")
def _convert_peak(conv):
    peak = max(v["peak_rss_bytes"] for m in ("warm", "cold") for k, v in conv["results"][m].items()
               if k.startswith("ckpt convert"))
    return (f"converting a {conv['bytes'] / 1e9:.0f} GB checkpoint into {conv['max_shard_size']} shards peaks at "
            f"{_mib(peak):.1f} MiB of memory")


@figure("convert-chart", "convert")
def _convert_chart(conv):
    """The caption of the README's one chart (bench/results/convert.png)."""
    res = conv["results"]
    ckpt, peer = "ckpt convert --no-sync", "safetensors load_file + hub save_torch_state_dict"
    return (f"**Converting a {conv['bytes'] / 1e9:.1f} GB Llama-shaped bf16 safetensors file into "
            f"{conv['max_shard_size']} shards**, each contender in its own process, median of "
            f"{len(res['warm']['cp']['runs'])}: `ckpt convert` runs at "
            f"{res['warm']['ratios']['ckpt_vs_cp (no fsync)']:.0%} of `cp`'s speed warm and "
            f"{res['cold']['ratios']['ckpt_vs_cp (no fsync)']:.0%} cold (neither syncing); its peak RSS, warm, is "
            f"{_mib(res['warm'][ckpt]['peak_rss_bytes']):.1f} MiB, and that of `load_file` + "
            f"`save_torch_state_dict` {_mib(res['warm'][peer]['peak_rss_bytes']):,.0f} MiB")


def issue30_targets(res, size):
    """Issue 30's targets, met or not, for the transformers suites' results."""
    over = max(res[c]["ckpt_peak_over_model_mib"] for c in res)
    cold = res["cold"]["speedup"]
    return (f"Targets (issue 30): peak RSS ≤ the model + 64 MiB — {'met' if over <= 64 else 'NOT met'}, ckpt's is "
            f"{over:+.0f} MiB over the model's {size / 2**20:,.0f} MiB; ≥ 1.5× faster cold — "
            f"{'met' if cold >= 1.5 else 'NOT met'}, {cold:.2f}× (warm {res['warm']['speedup']:.2f}×).")


@figure("transformers", "transformers")
def _transformers(tf):
    """Issue 30's measure: ckpt.transformers' from_pretrained against
    transformers' own, each load in its own process."""
    res, size = tf["results"], tf["bytes"]
    rows = ["| cache | loader | median time to a usable model | the call alone | peak RSS above imports |",
            "|---|---|---:|---:|---:|"]
    for cache in ("warm", "cold"):
        for name, label in (("ckpt", "ckpt.transformers"), ("transformers", "transformers")):
            r = res[cache][name]
            rows.append(f"| {cache} | {label} | {r['median_usable_s']:.2f} s | {r['median_call_s']:.2f} s | "
                        f"{r['max_peak_above_imports_mib']:,.0f} MiB |")
    la = tf["load_average"]
    return (f"a {size / 1e9:.2f} GB bf16 Llama (`model.safetensors` + config.json), `AutoModelForCausalLM."
            f"from_pretrained(dtype=\"auto\")`, median of {tf['runs']}, the loaders alternating; time until one "
            f"byte of every weight page has been read; cold = the file's pages dropped before each run; load average "
            f"{la['min']:.1f}–{la['max']:.1f}.\n\n" + "\n".join(rows) + "\n\n"
            + issue30_targets(res, size) + "\n\n" + measured(tf)[0])


def not_measured_yet(measurement):
    """What a figure says in place of a result its measurement has not yet
    written (bench/suites.py PENDING_FIRST_RUN)."""
    return f"*Not measured yet: {suites.PENDING_FIRST_RUN[measurement]}.*"


@figure("transformers-hub", "transformers-hub-2GB")
def _transformers_hub(tf):
    """Issue 30's measure from the Hub: the same loaders given a repo id,
    each load from an empty Hub cache in its own process."""
    if tf is None and "transformers hub" in suites.PENDING_FIRST_RUN:
        return not_measured_yet("transformers hub")
    res, size = tf["results"], tf["bytes"]
    rows = ["| cache | loader | median time to a usable model (min–max) | the call alone | peak RSS above imports | "
            "the server sent |", "|---|---|---:|---:|---:|---:|"]
    for cache in ("warm", "cold"):
        for name, label in (("ckpt", "ckpt.transformers"), ("transformers", "transformers")):
            r = res[cache][name]
            rows.append(f"| {cache} | {label} | {r['median_usable_s']:.2f} s ({r['min_usable_s']:.2f}–"
                        f"{r['max_usable_s']:.2f}) | {r['median_call_s']:.2f} s | "
                        f"{r['max_peak_above_imports_mib']:,.0f} MiB | {r['median_server_sent_bytes'] / 1e9:.2f} GB |")
    la = tf["load_average"]
    return (f"a {size / 1e9:.2f} GB bf16 Llama (`model.safetensors` + config.json) served by the tests' loopback "
            f"Hub (tests/sources/hub.py, from disk), `AutoModelForCausalLM.from_pretrained(\"{tf['repo']}\", "
            f"dtype=\"auto\")` from an empty Hub cache each load, median of {tf['runs']}, the loaders alternating; "
            f"time until one byte of every weight page has been read; cold = {cold_how(tf)}, those of the file the server sends; the "
            f"two state dicts {'equal' if tf['state_dicts_equal'] else 'DIFFER'}; load average "
            f"{la['min']:.1f}–{la['max']:.1f}.\n\n" + "\n".join(rows) + "\n\n"
            + issue30_targets(res, size) + "\n\n" + measured(tf)[0])


@figure("gpu-line", "gpu-h200")
def _gpu_line(doc):
    """The README's line for issue 31: the GPU, warm against the ceiling and
    safetensors' device load, cold against the disk."""
    b = doc["bench"]
    runs = {(r["loader"], r["cache"]): r for r in b["runs"] if "GBps" in r}
    warm, cold = runs[("ckpt device=", "warm")], runs[("ckpt device=", "cold")]
    st = runs.get(("safetensors load_file(device=)", "warm"))
    vs = f" and {warm['GBps'] / st['GBps']:.1f}× `safetensors.torch.load_file(device=)`" if st else ""
    t = b["targets"]
    return (f"**Onto a GPU** (an {doc['gpu']}): 8 GB of bf16 from the page cache at {warm['GBps']:.1f} GB/s, "
            f"{t['warm_vs_h2d_ceiling']:.2f}× a pinned copy's ceiling{vs}; cold {cold['GBps']:.2f} GB/s, "
            f"{t['cold_vs_odirect_ceiling']:.2f}× the disk's O_DIRECT read; the process's memory grew by "
            f"{t['rss_growth_MiB']:.0f} MiB at most, its ring of pinned slots included "
            f"([docs/PYTHON.md](docs/PYTHON.md#straight-onto-a-gpu))")


@figure("gpu", "gpu-h200")
def _gpu(doc):
    """Issue 31's measure: 8 GB of bf16 onto the GPU (tests/gpu/bench.py),
    the ring's probe (tests/gpu/probe.py) and the GPU tests' outcomes."""
    b = doc["bench"]
    runs = {(r["loader"], r["cache"]): r for r in b["runs"] if "GBps" in r}
    loaders = list(dict.fromkeys(r["loader"] for r in b["runs"]))
    rows = ["| loader | warm | cold | host RSS growth |", "|---|---:|---:|---:|"]
    def speed(r, digits):
        return f"{r['GBps']:.{digits}f} GB/s" if r else "—"
    for name in loaders:
        w, c = runs.get((name, "warm")), runs.get((name, "cold"))
        rss = max((r["rss_growth_MiB"] for r in (w, c) if r), default=None)
        rows.append(f"| {name} | {speed(w, 1)} | {speed(c, 2)} | "
                    + (f"{rss:,.0f} MiB" if rss is not None else "—") + " |")
    t = b["targets"]
    warm, cold = t.get("warm_vs_h2d_ceiling", 0), t.get("cold_vs_odirect_ceiling", 0)
    ring_ok = t.get("rss_growth_MiB", 1e9) <= t.get("ring_plus_64_MiB", 0)
    tests = []
    for label, got in doc["tests"].items():
        passed = sum(e["outcome"] == "passed" for e in got)
        others = [f"`{e['test']}` {e['outcome']}" for e in got if e["outcome"] != "passed"]
        tests.append(f"{label}: {passed} passed" + "".join(f", {o}" for o in others))
    cf = b.get("ckpt_cufile_device_stats") or {}
    if cf.get("cufile_files_refused") and not cf.get("bytes_direct"):
        rows.append("")
        log = ((doc.get("probe") or {}).get("cufile") or {}).get("cufile_log", "")
        why = ("; its log: the machine's libcufile cannot read the disk's volume attributes"
               if "volume attributes" in log else "")
        rows.append(f"cuFile refused every file here ({cf['cufile_files_refused']} registrations refused{why}), so "
                    "its row is the ring's; `test_real_cufile_bit_exact` skips on such a machine, after checking "
                    "the bytes and that libcufile, driven by hand, refuses the file too.")
    p = doc.get("probe") or {}
    ring = {(r["slots"], r["slot_MiB"], r["threads"], r["chunk_MiB"]): r["GBps"] for r in p.get("ring", []) if "GBps" in r}
    probe = ""
    if (8, 8, 0, 0.0) in ring and (32, 8, 0, 0.0) in ring:
        probe = (f" The probe (tests/gpu/probe.py, the page cache warm): the ring of 8 slots of 8 MiB carried "
                 f"{ring[(8, 8, 0, 0.0)]:.1f} GB/s, of 32 slots {ring[(32, 8, 0, 0.0)]:.1f} GB/s, the default since; "
                 f"one thread reading into pinned memory {p['pread_pinned_GBps']:.1f} GB/s; an event's wait "
                 f"{p['event_wait_us']['median']:.0f} µs.")
    return (f"On an {doc['gpu']} (`tests/gpu/run.sh`): 8 GB of bf16 in 1 GiB safetensors shards onto `cuda:0`, "
            f"warm (the files in the page cache, best of 2) and cold (their pages dropped first, one run each; "
            f"the first row's cold run also opens the device: its 256 MiB of pinned slots). Ceilings measured in "
            f"the same run: a pinned host-to-device copy {b['h2d_ceiling_GBps']:.1f} GB/s, the disk read with "
            f"O_DIRECT {b['disk_odirect_GBps']:.2f} GB/s.\n\n" + "\n".join(rows) + "\n\n"
            f"Targets (issue 31): warm ≥ 0.85 × the copy ceiling — {'met' if warm >= 0.85 else 'NOT met'}, "
            f"{warm:.2f}×; cold ≥ 0.9 × the O_DIRECT ceiling — {'met' if cold >= 0.9 else 'NOT met'}, {cold:.2f}×; "
            f"host memory ≤ the ring + 64 MiB — {'met' if ring_ok else 'NOT met'}, "
            f"{t.get('rss_growth_MiB', 0):.0f} MiB against {t.get('ring_plus_64_MiB', 0):.0f} MiB.{probe} "
            f"GPU tests ({'; '.join(tests)}).\n\n" + measured(doc)[0])


@figure("torch-read", "torch_read")
def _torch_read(tr):
    tr = tr["results"]
    return (f"A ResNet-152-shaped file reads into buffers with "
            f"{tr['ckpt (owned buffers, checksum)']['rss_over_file_mib']:.1f} MiB of overhead, while `torch.load` adds "
            f"{tr['torch.load(weights_only=True) + checksum']['rss_over_file_mib']:.0f} MiB")


@figure("open", "open")
def _open(op):
    return (f"30,000 tensors in 8 shards open in {op['results']['ckpt']['median'] * 1e3:.0f} ms from C, "
            f"{op['ratio_peer_over_ckpt']:.1f}× as fast as safetensors' own `safe_open` over the same shards")


@figure("open-python", "perf")
def _open_python(perf):
    o, pr = perf["results"]["open"], perf["ratios"]
    ip = o["in_process"]["ckpt.open + tensors (this tree)"]["median"]
    return (f"from Python, `ckpt.open` with every shape and dtype takes {ip * 1e3:.0f} ms "
            f"({pr['open in process with shapes and dtypes: ckpt (this tree) vs safe_open']:.1f}× safetensors), "
            f"and a whole process that opens and lists the names "
            f"{pr['open whole process: ckpt (this tree) vs index + safe_open + keys()']:.1f}× as fast")


@figure("load-file-cold", "python-2GB")
def _load_file_cold(py):
    r = py["ratios"]["cold: ckpt.torch.load_file / safetensors.torch.load_file (load + checksum)"]
    return f"{r:.1f}× safetensors' speed in the latest run"


@figure("load-into", "perf")
def _load_into(perf):
    into = perf["results"]["into"]
    ours, theirs = into["warm"]["ckpt.load_into(module) (this tree)"], into["warm"]["module.load_state_dict(load_file)"]
    cold = into["cold"]["ckpt.load_into(module) (this tree)"]
    return (f"{_mib(ours['rss_over_module_max_bytes']):.1f} MiB measured warm for "
            f"{perf['bytes'] / 1e9:.0f} GB of parameters, against {theirs['rss_over_module_max_bytes'] / 2**30:.0f} "
            f"GiB for `load_state_dict(load_file(...))`; cold, up to the O_DIRECT ring: "
            f"{_mib(cold['rss_over_module_max_bytes']):.1f} MiB")


@figure("rust", "bindings")
def _rust(doc):
    rust = doc["rust"]["results"]
    vecs = "Rust ckpt: Plan::load_vecs into typed Vecs"
    return (f"at about {rust['warm'][vecs]['rss_over_file_mib']:.0f} MiB above the file's size "
            f"({rust['cold'][vecs]['rss_over_file_mib']:.0f} MiB cold, the engine's O_DIRECT bounce ring), "
            f"where `torch.load` adds {rust['warm']['torch.load(weights_only=True)']['rss_over_file_mib']:.0f} MiB")


def _overlap(r):
    """Whether the checked and unchecked runs' min–max spreads overlap."""
    return r["crc"]["min_s"] <= r["nocrc"]["max_s"] and r["nocrc"]["min_s"] <= r["crc"]["max_s"]


@figure("crc", "crc")
def _crc(doc):
    r = doc["results"]
    both = [k for k, v in r.items() if _overlap(v)]
    spreads = ("their min–max spreads overlap" if len(both) == len(r) else
               f"min–max spreads overlapping in {', '.join(both) or 'no case'}")
    return (f"checking changed a warm load of a {doc['bytes'] / 1e9:.2f} GB torch `.bin` by "
            f"{r['pre-touched caller buffers']['cost']:+.0%} into pre-touched buffers and "
            f"{r['fresh library buffers']['cost']:+.0%} into fresh ones, and its conversion by "
            f"{r['ckpt convert']['cost']:+.0%} (medians of {doc['runs']} alternating rounds on a shared machine; "
            f"{spreads})")


def _span(r):
    return f"{r['median_s']:.3f} s [{r['min_s']:.3f}–{r['max_s']:.3f}]"


@figure("crc-cost", "crc")
def _crc_cost(doc):
    r, sp = doc["results"], doc["machine_speeds"]
    la = doc["load_average"]
    return (f"zlib {sp['zlib']}'s table-driven crc32 runs at {sp['zlib_crc32_gb_per_s']:.2f} GB/s here, against "
            f"memcpy's {sp['memcpy_gb_per_s']:.1f} GB/s. Cost (`make bench BENCH_ARGS=\"crc --runs {doc['runs']}\"`: "
            f"a {doc['bytes'] / 1e9:.2f} GB Llama-style bf16 torch `.bin`, warm, whole, checked and not in "
            f"{doc['runs']} alternating rounds; {doc['machine']['cpus']} CPUs shared with other jobs, load average "
            f"{la['min']:.0f}–{la['max']:.0f}): into pre-touched caller buffers "
            f"{_span(r['pre-touched caller buffers']['crc'])} checked against "
            f"{_span(r['pre-touched caller buffers']['nocrc'])} ({r['pre-touched caller buffers']['cost']:+.0%}); "
            f"into fresh library buffers {_span(r['fresh library buffers']['crc'])} against "
            f"{_span(r['fresh library buffers']['nocrc'])} ({r['fresh library buffers']['cost']:+.0%}); "
            f"`ckpt convert` to safetensors, which then reads through memory instead of copy_file_range, "
            f"{_span(r['ckpt convert']['crc'])} against {_span(r['ckpt convert']['nocrc'])} "
            f"({r['ckpt convert']['cost']:+.0%})")


AMPLIFYING = {"msgpack-nils": "{mb} of msgpack nils", "gguf-empty-arrays": "a {mb} GGUF of a million empty arrays",
              "pickle-nones": "a {mb} pickle of 4 M Nones", "safetensors-zeros": "a {mb} safetensors header of zeros"}


@figure("amplification", "amplification")
def _amplification(doc):
    """`ckpt inspect` on each amplifying input: peak RSS before the bound (the baseline) and now."""
    now = doc["results"]["this tree"]["ckpt inspect"]
    before = next(r for tree, r in doc["results"].items() if tree != "this tree")["ckpt inspect"]
    parts = []
    for name, what in AMPLIFYING.items():
        size = f"{now[name]['bytes'] / 1e6:.0f} MB"
        parts.append(f"{what.format(mb=size)} {_mib(before[name]['peak_rss_bytes']):.0f} → "
                     f"{_mib(now[name]['peak_rss_bytes']):.0f} MiB, {'read' if now[name]['outcome'] == 'read' else 'refused'}")
    over = [n for n in AMPLIFYING if not now[n]["within_bound"]]
    bound = (f"each now within the bound over a tiny file's {_mib(now['tiny']['peak_rss_bytes']):.0f} MiB" if not over
             else f"over the bound: {', '.join(over)}")
    return f"`ckpt inspect`'s peak RSS, before the bound → now: {'; '.join(parts)}; {bound}"


@figure("fuzz-journal", "fuzz-journal")
def _fuzz_journal(doc):
    kinds = doc["artifacts_by_kind"]
    return (f"{doc['executions']:,} inputs in {doc['seconds']} s: {kinds['crash']} crashes, {kinds['leak']} leaks, "
            f"{kinds['timeout']} timeouts")


@figure("casts", "load-2GB")
def _casts(doc):
    ms = doc["machine_speeds"]
    return (f"bf16→f32 {ms['cast_bf16_to_f32']['gb_per_s']:.0f} GB/s, f32→bf16 {ms['cast_f32_to_bf16']['gb_per_s']:.0f} "
            f"GB/s, f16→f32 {ms['cast_f16_to_f32']['gb_per_s']:.0f} GB/s, f32→f16 "
            f"{ms['cast_f32_to_f16']['gb_per_s']:.0f} GB/s (output bytes), against memcpy's "
            f"{ms['memcpy']['gb_per_s']:.0f} GB/s in the same run")


@figure("distributed-headers", "distributed")
def _distributed_headers(doc):
    top = doc["mpi_sim"]["rows"][-1]
    return (f"at {top['ranks']} ranks below, {top['header_bytes_read_each'] / 1e6:.1f} MB of header reads instead of "
            f"{top['header_bytes_read_bcast'] / 1e6:.1f} MB")


@figure("distributed-open", "distributed")
def _distributed_open(doc):
    top = doc["mpi_sim"]["rows"][-1]
    return (f"at {top['ranks']} ranks on this machine's {doc['machine']['cpus']} cores, opening a "
            f"{top['tensors']:,}-tensor, {top['files']}-file checkpoint took {top['open_each_s']:.2f} s when every "
            f"rank parsed it and {top['open_bcast_s']:.2f} s when rank 0 parsed and broadcast")


@figure("distributed-vote", "distributed")
def _distributed_vote(doc):
    rows = doc["mpi_sim"]["rows"]
    two = next(r for r in rows if r["ranks"] == 2)
    return f"{rows[-1]['vote_s'] * 1e3:.2f} ms at {rows[-1]['ranks']} ranks ({two['vote_s'] * 1e3:.2f} ms at 2)"


@figure("distributed-received", "distributed")
def _distributed_received(doc):
    v = doc["tp_load"]["results"]["warm"]["ckpt.distributed.load, 4 ranks"]["per_rank"]
    return f"{_mib(max(r['bytes_received'] for r in v)):.2f} MiB per rank received"


@figure("distributed-save-rss", "distributed")
def _distributed_save_rss(doc):
    v = doc["save"]["results"]["ckpt.distributed.save, 4 ranks"]["per_rank"]
    return f"{max(r['rss_above_own_mib'] for r in v):.0f} MiB"


@figure("distributed-tables", "distributed")
def _distributed_tables(doc):
    m = doc["machine"]
    machine = [f"Machine: {m.get('cpu', '?')}, {m.get('cpus')} CPUs, {m.get('mem_gib')} GiB, {m.get('data_fs', '?')}; "
               f"torch {m.get('torch')}.", ""]
    return "\n".join(distributed_table(doc) + machine + measured(doc)).strip()


@figure("llamacpp-check", "llamacpp-check")
def _llamacpp_check(doc):
    return "\n".join(llamacpp_check_table(doc)).strip()


@figure("llamacpp-4gb", "llamacpp-4GB")
def _llamacpp_4gb(doc):
    return "\n".join(llamacpp_table(doc)).strip()


@figure("llamacpp-1gb", "llamacpp-1GB")
def _llamacpp_1gb(doc):
    return "\n".join(llamacpp_table(doc)).strip()


@figure("llamacpp-quantize-check", "llamacpp-quantize-check")
def _llamacpp_quantize_check(doc):
    return "\n".join(llamacpp_quantize_check_table(doc)).strip()


@figure("when-to-use", "perf")
def when_to_use(perf):
    g = perf["results"]

    def t(group, label, mode):
        return _fmt_s(g[group][mode][label]["median"])
    rows = [f"| call | gives | use it when | measured ({perf['bytes'] / 1e9:.0f} GB bf16, warm / cold) |",
            "|---|---|---|---|"]
    if "load" in g:
        rows.append("| `ckpt.torch.load_file(path)` | safetensors' `load_file`, for every format | replacing "
                    "`safetensors.torch.load_file` as is | see [bench/README.md](../bench/README.md) |")
        rows.append(f"| `ckpt.load(path)` | copy-on-write views where no conversion is needed, new memory "
                    f"for casts and layouts | a dict of tensors, whole or as a tensor-parallel rank | "
                    f"{t('load', 'ckpt.load (this tree)', 'warm')} / {t('load', 'ckpt.load (this tree)', 'cold')}; "
                    f"`load_file` {t('load', 'safetensors load_file', 'warm')} / "
                    f"{t('load', 'safetensors load_file', 'cold')} |")
    if "into" in g:
        lbl = "ckpt.load_into(module) (this tree)"
        rows.append(f"| `ckpt.load_into(module, path)` | the bytes in the module's own parameters | the model "
                    f"exists already: no second copy in memory | {t('into', lbl, 'warm')} / {t('into', lbl, 'cold')}, "
                    f"{_mib(g['into']['warm'][lbl]['rss_over_module_max_bytes']):.1f} / "
                    f"{_mib(g['into']['cold'][lbl]['rss_over_module_max_bytes']):.1f} MiB above the module |")
    rows.append("| `ckpt.load(path, copy=True)` | memory of its own for every tensor | the file may change or "
                "vanish while the tensors live, or a network file system |" +
                (f" {t('load', 'ckpt.load(copy=True) (this tree)', 'warm')} / "
                 f"{t('load', 'ckpt.load(copy=True) (this tree)', 'cold')} |" if "load" in g else " |"))
    return "\n".join(rows + [""] + measured(perf)).strip()


def figures():
    """{name: text} for the fig markers of the pages (DOCS); KeyError
    or TypeError when a result a text needs is missing.  A figure from a
    result knowingly stale (bench/suites.py PENDING_RERUN) says so: a table
    in the line measured() renders under it, a phrase in its stale_note()."""
    out = {}
    for name, (results, render) in FIGURES.items():
        text = render(*(load(r) for r in results))
        out[name] = text if "\n" in text else text + stale_note(results)
    return out


FIG = re.compile(r"<!-- fig:([a-z0-9-]+) -->(.*?)<!-- /fig -->", re.S)


def render_figures(text, figs):
    """The text with every fig marker's content rendered from figs."""
    def sub(m):
        if m.group(1) not in figs:
            raise KeyError(f"figure {m.group(1)!r} has no result in bench/results")
        body = figs[m.group(1)]
        return f"<!-- fig:{m.group(1)} -->{chr(10) + body + chr(10) if chr(10) in body else body}<!-- /fig -->"
    return FIG.sub(sub, text)


BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def render(path):
    """The text of a page (DOCS) as this report renders it: its figures,
    and (bench/README.md) the tables between the bench markers."""
    text = render_figures(path.read_text(), figures())
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = f"{head}{BEGIN}\n{table()}\n{END}{tail}"
    return text


def distributed_chart(doc):
    """The distributed suite: the TP load, the collective save, the MPI simulation."""
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    tp = doc.get("tp_load")
    if tp:
        ax = axes[0]
        labels, vals, cols = [], [], []
        for cache in ("warm", "cold"):
            for k, v in tp["results"][cache].items():
                labels.append(f"{k.split(',')[0]}\n{k.split(',')[1].strip() if ',' in k else ''} ({cache})")
                vals.append(v["median"])
                cols.append("#2a7" if k.startswith("ckpt.distributed") else "#999")
        ax.barh(labels, vals, color=cols)
        ax.set_xlabel("seconds (median, slowest rank)")
        ax.set_title(f"{tp['bytes'] / 1e9:.0f} GB bf16, TP rank r of {tp['world']}")
        ax.tick_params(axis="y", labelsize=7)
    sv = doc.get("save")
    if sv:
        ax = axes[1]
        names = list(sv["results"])
        ax.barh(names, [sv["results"][n]["median"] for n in names], color=["#2a7", "#999"])
        ax.set_xlabel("seconds (median)")
        ax.set_title(f"save {sv['gb']:.0f} GB")
        ax.tick_params(axis="y", labelsize=7)
    sim = doc.get("mpi_sim")
    if sim and sim.get("rows"):
        ax = axes[2]
        n = [r["ranks"] for r in sim["rows"]]
        ax.plot(n, [r["open_each_s"] * 1e3 for r in sim["rows"]], "o-", color="#999", label="every rank parses")
        ax.plot(n, [r["open_bcast_s"] * 1e3 for r in sim["rows"]], "o-", color="#2a7", label="rank 0 parses, broadcast")
        ax.plot(n, [r["save_s"] * 1e3 for r in sim["rows"]], "s--", color="#27a", label="16 MiB shard-writer save")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks (mpirun --oversubscribe, 2 cores)")
        ax.set_ylabel("ms (median, slowest rank)")
        ax.set_title(f"open {sim['tensors']:,} tensors; save")
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_chart(fig, "distributed.png", dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--publish", action="store_true",
                    help="write the charts into bench/results/ (committed), not build/bench-charts/")
    global CHARTS
    if ap.parse_args().publish:
        CHARTS = RESULTS
    open_doc, convert_doc = load("open"), load("convert")
    torch_convert = load("torch_convert")
    charts(open_doc, convert_doc)
    for doc in load_docs():
        load_chart(doc)
    for doc in python_docs():
        if "load_file_cold" in doc["results"]:
            python_chart(doc)
    for doc in jax_docs():
        jax_chart(doc)
    if torch_convert:
        charts(None, torch_convert, name="torch_convert")
    if load("gguf") and "cases" in load("gguf"):
        gguf_chart(load("gguf"))
    if load("dcp"):
        dcp_chart(load("dcp"))
    for size in ("4GB", "1GB"):
        if load(f"llamacpp-{size}"):
            llamacpp_chart(load(f"llamacpp-{size}"))
    sources_charts()
    if load("bindings"):
        bindings_chart(load("bindings"))
    if load("baseline"):
        baseline_chart(load("baseline"))
    if load("perf"):
        perf_chart(load("perf"))
    if load("distributed"):
        distributed_chart(load("distributed"))
    for path in DOCS:
        text = render(path)
        if text != path.read_text():
            path.write_text(text)
            print(f"{path.relative_to(ROOT)} updated")


if __name__ == "__main__":
    main()

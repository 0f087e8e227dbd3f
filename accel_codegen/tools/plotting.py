"""PNG plots of a benchmark, a design-space sweep and a run's timeline (matplotlib, Agg
backend: no display).

``plot_bench(result, path)`` takes the dict of :func:`accel_codegen.bench.run_bench`;
``plot_sweep(result, path)`` the dict of :func:`accel_codegen.estimation.sweep`;
``plot_timeline(trace, path)`` a Chrome trace of :mod:`accel_codegen.sim.timeline` (a dict or
its JSON file): our rendering of what Perfetto shows; ``plot_mixed_precision(search, path)``
the path of a mixed-precision search (:mod:`accel_codegen.flows.mixed`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

COLORS = {"fused": "#1b7837", "decomposed": "#c2a5cf", "host": "#8c8c8c", "pytorch": "#ee8a2a"}
DARK = {"fused": "#0b4d22", "decomposed": "#762a83"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _short(label: str) -> str:
    """"f0.6b accel.conv2d_bn_add_conv2d_bn_relu" -> "6b conv_bn_add_conv_bn_relu"."""
    index, _, rest = label.partition(" ")
    index = index.split(".", 1)[-1]
    rest = rest.replace("accel.", "").replace("conv2d", "conv").replace(" (branch)", "")
    return f"{index} {rest}"


def _wall_panel(ax, modes: Dict[str, Any]) -> None:
    """(a) wall time per mode, median with a min..max bar, against PyTorch when measured."""
    names = list(modes)
    med = [modes[m]["wall_ms"]["median"] for m in names]
    lo = [modes[m]["wall_ms"]["median"] - modes[m]["wall_ms"]["min"] for m in names]
    hi = [modes[m]["wall_ms"]["max"] - modes[m]["wall_ms"]["median"] for m in names]
    y = range(len(names))
    ax.barh(y, med, xerr=[lo, hi], color=[COLORS.get(m, "#555") for m in names],
            capsize=3, ecolor="#333")
    ax.set_yticks(list(y), names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("wall time per inference, ms (log; median, bar = min..max)")
    ax.set_title("Wall time on this CPU")
    reference = modes.get("pytorch", {}).get("wall_ms", {}).get("median")
    for i, (m, v) in enumerate(zip(names, med)):
        note = f"{v:,.1f} ms" + (f"  ({v / reference:.2f}x PyTorch)" if reference and
                                 m != "pytorch" else "")
        ax.text(modes[m]["wall_ms"]["max"] * 1.15, i, note, va="center", fontsize=9)
    ax.set_xlim(min(modes[m]["wall_ms"]["min"] for m in names) / 2, max(med) * 40)
    ax.grid(axis="x", which="major", alpha=0.3)


def _simulated_panel(ax, modes: Dict[str, Any], accel: List[str], clock_hz: float) -> None:
    """(b) simulated time per inference of the accelerator modes."""
    if accel:
        sim = [modes[m]["simulated_ms"] for m in accel]
        ax.bar(accel, sim, color=[COLORS[m] for m in accel], width=0.55)
        for i, m in enumerate(accel):
            e = modes[m]
            ax.text(i, sim[i], f"{sim[i]:.2f} ms\n{e['frames_per_s']:,.0f} frames/s\n"
                    f"MAC util {e['utilization']:.0%}", ha="center", va="bottom", fontsize=9)
        ax.set_ylim(0, max(sim) * 1.45)
    ax.set_ylabel(f"simulated ms per inference at {clock_hz / 1e9:g} GHz")
    ax.set_title("Simulated time (cost model cycles)")
    ax.grid(axis="y", alpha=0.25)


def _traffic_panel(ax, modes: Dict[str, Any], accel: List[str]) -> None:
    """(c) memory traffic per inference of the accelerator modes, read and written."""
    if accel:
        read = [modes[m]["bytes_read"] / 1e6 for m in accel]
        written = [modes[m]["bytes_written"] / 1e6 for m in accel]
        ax.bar(accel, read, color=[COLORS[m] for m in accel], width=0.55, label="read")
        ax.bar(accel, written, bottom=read, color=[DARK[m] for m in accel], width=0.55,
               label="written", hatch="//", edgecolor="white")
        for i in range(len(accel)):
            ax.text(i, read[i] + written[i], f"{read[i] + written[i]:.1f} MB\n"
                    f"({read[i]:.1f} read, {written[i]:.1f} written)", ha="center",
                    va="bottom", fontsize=9)
        ax.set_ylim(0, max(r + w for r, w in zip(read, written)) * 1.35)
        if len(accel) == 2:
            ratio = (read[1] + written[1]) / (read[0] + written[0])
            ax.set_title(f"Memory traffic: fused moves {ratio:.2f}x fewer bytes")
        else:
            ax.set_title("Memory traffic")
        ax.legend(loc="upper left", fontsize=8)
    ax.set_ylabel("MB moved per inference")
    ax.grid(axis="y", alpha=0.25)


def _per_layer_panel(ax, layers: List[dict], value, ratio_format: Optional[str], ylabel: str,
                     title: str, log: bool = False) -> None:
    """Bars per layer, fused beside decomposed: ``value(row, mode)`` (None: no bar), labelled
    with decomposed / fused in ``ratio_format`` when both are there."""
    x = list(range(len(layers)))
    width = 0.4
    for offset, m in ((-width / 2, "fused"), (width / 2, "decomposed")):
        values = [value(r, m) or 0 for r in layers]
        ax.bar([i + offset for i in x], values, width, color=COLORS[m], label=m,
               edgecolor=DARK[m], linewidth=0.5)
    if ratio_format:
        for i, r in enumerate(layers):
            f, d = value(r, "fused"), value(r, "decomposed")
            if f and d is not None:
                ax.text(i, max(f, d), format(d / f, ratio_format) + "x", ha="center",
                        va="bottom", fontsize=7, color="#444")
    ax.set_xticks(x, [_short(r["label"]) for r in layers], rotation=35, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(layers) - 0.4)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title, loc="left")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(axis="y", alpha=0.25)
    ax.margins(y=0.15)


def _figure(value, scale: float):
    """``value(row, mode)`` of a per-layer figure: ``key(row[mode]) / scale``, None when the
    mode has no figures for the layer."""
    return lambda row, mode: value(row[mode]) / scale if mode in row else None


#: How the bench plot's title names each mode (in this order), when it ran.
_TITLE_MODES = (("fused", "fused"), ("decomposed", "decomposed"),
                ("fused_int8", "fused int8"), ("host", "TVM's host build"),
                ("pytorch", "PyTorch eager"), ("ort_fp32", "ONNX Runtime fp32"),
                ("ort_int8", "ONNX Runtime int8"))


def bench_title(result: Dict[str, Any]) -> str:
    """The bench plot's title: the model and the modes that ran (a skipped one is not named)."""
    ran = [name for mode, name in _TITLE_MODES if mode in result["modes"]]
    ran += [m for m in result["modes"] if m not in dict(_TITLE_MODES)]
    simulated = [name for name in ran if name in ("fused", "decomposed", "fused int8")]
    others = [name for name in ran if name not in simulated]
    parts = ([" vs ".join(simulated) + " on the simulated accelerator"] if simulated else []) \
        + others
    joined = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1] \
        if parts else "no mode ran"
    return f"{result['model']}: {joined}"


def plot_bench(result: Dict[str, Any], path) -> Path:
    """Bars per mode (wall time; simulated time and memory traffic for the accelerator modes)
    and, when the result has per-layer rows, the per-layer bytes and cycles, fused against
    decomposed (and the per-layer wall time when measured)."""
    plt = _pyplot()
    modes = result["modes"]
    layers: List[dict] = [r for r in result.get("layers", []) if "fused" in r or
                          "decomposed" in r]
    has_wall = any("fused_wall_ms" in r for r in layers)
    rows = 1 + (2 if layers else 0) + (1 if has_wall else 0)
    fig = plt.figure(figsize=(15, 3.6 + 3.2 * (rows - 1)), constrained_layout=True)
    grid = fig.add_gridspec(rows, 3, height_ratios=[1.15] + [1] * (rows - 1))
    cfg = result["config"]
    fig.suptitle(f"{bench_title(result)}\n{cfg['name']}: {cfg['atomic_c']}x"
                 f"{cfg['atomic_k']} MACs, {cfg['dram_bytes_per_s'] / 1e9:g} GB/s DRAM, "
                 f"{cfg['clock_hz'] / 1e9:g} GHz; {result['threads']} thread(s)"
                 + (", TVM host build on 1" if "host" in modes else ""),
                 fontsize=12, fontweight="bold")
    accel = [m for m in ("fused", "decomposed") if m in modes]
    _wall_panel(fig.add_subplot(grid[0, 0]), modes)
    _simulated_panel(fig.add_subplot(grid[0, 1]), modes, accel, cfg["clock_hz"])
    _traffic_panel(fig.add_subplot(grid[0, 2]), modes, accel)
    if layers:
        _per_layer_panel(fig.add_subplot(grid[1, :]), layers,
                         _figure(lambda e: e["bytes_read"] + e["bytes_written"], 1e3), ".1f",
                         "KB moved", "Per layer: memory traffic (label = decomposed / fused)")
        _per_layer_panel(fig.add_subplot(grid[2, :]), layers,
                         _figure(lambda e: e["cycles"], 1e3), ".1f", "thousand cycles (log)",
                         "Per layer: simulated cycles (label = decomposed / fused)", log=True)
    if has_wall:
        _per_layer_panel(fig.add_subplot(grid[3, :]), layers,
                         lambda r, m: r.get(f"{m}_wall_ms", {}).get("median"), ".2f",
                         "wall ms (median)", "Per layer, each run alone on the simulator: wall "
                         "time on this CPU (label = decomposed / fused)")
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_sweep(result: Dict[str, Any], path) -> Path:
    """frames/s, frames per joule, MAC utilisation and the memory-bound share of cycles
    against DRAM bandwidth, one line per MAC-array size (line style per CBUF size)."""
    plt = _pyplot()
    points = result["points"]
    macs = sorted({p["macs"] for p in points})
    cbufs = sorted({p["cbuf_kib"] for p in points})
    styles = ["-", "--", ":", "-."]
    cmap = plt.get_cmap("viridis")
    fig, axes = plt.subplots(1, 4, figsize=(21, 5.6), layout="constrained")
    fig.suptitle(f"{result['model']} ({result['precision']}, "
                 f"{'fused' if result['fuse'] else 'decomposed'}): where it becomes memory bound "
                 "— cost-model estimates across accelerator configurations",
                 fontsize=13, fontweight="bold")
    panels = [("frames_per_s", "simulated frames/s", "Throughput", False),
              ("frames_per_joule", "simulated frames per joule",
               "Energy efficiency", False),
              ("utilization", "MAC-array utilisation", "MAC utilisation", True),
              ("memory_bound_share", "share of cycles in memory-bound layers",
               "Memory-bound share of the time", True)]
    for ax, (key, ylabel, title, percent) in zip(axes, panels):
        for i, m in enumerate(macs):
            color = cmap(i / max(len(macs) - 1, 1) * 0.9)
            for j, cbuf in enumerate(cbufs):
                series = sorted((p["dram_gbps"], p[key]) for p in points
                                if p["macs"] == m and p["cbuf_kib"] == cbuf)
                if not series:
                    continue
                first = next(p for p in points if p["macs"] == m)
                label = f"{m} MACs ({first['atomic_c']}x{first['atomic_k']})"
                if len(cbufs) > 1:
                    label += f", CBUF {cbuf} KiB"
                ax.plot([s[0] for s in series], [s[1] for s in series], styles[j % 4],
                        marker="o", color=color, label=label, linewidth=2)
        ax.set_xscale("log")
        dram = sorted({p["dram_gbps"] for p in points})
        ax.set_xticks(dram, [f"{d:g}" for d in dram])
        ax.minorticks_off()
        ax.set_xlabel("DRAM bandwidth, GB/s (log)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if percent:
            ax.set_ylim(0, 1.05)
            ax.yaxis.set_major_formatter(plt.matplotlib.ticker.PercentFormatter(1.0))
    axes[0].set_yscale("log")
    axes[0].yaxis.set_major_formatter(plt.matplotlib.ticker.FuncFormatter(
        lambda v, _: f"{v:,.0f}"))
    axes[0].yaxis.set_minor_formatter(plt.matplotlib.ticker.FuncFormatter(
        lambda v, _: f"{v:,.0f}" if str(int(v))[0] in "25" else ""))
    # One legend for the figure: colour = MAC array, line style = CBUF (with its traffic).
    from matplotlib.lines import Line2D

    handles = []
    for i, m in enumerate(macs):
        first = next(p for p in points if p["macs"] == m)
        handles.append(Line2D([], [], color=cmap(i / max(len(macs) - 1, 1) * 0.9), marker="o",
                              linewidth=2, label=f"{m} MACs ({first['atomic_c']}x"
                              f"{first['atomic_k']})"))
    for j, cbuf in enumerate(cbufs):
        traffic = sorted({p["bytes"] / 1e6 for p in points if p["cbuf_kib"] == cbuf})
        moved = f"{traffic[0]:.1f}" if traffic[-1] - traffic[0] < 0.05 else \
            f"{traffic[0]:.1f}-{traffic[-1]:.1f}"
        handles.append(Line2D([], [], color="#555", linestyle=styles[j % 4], linewidth=2,
                              label=f"CBUF {cbuf} KiB: {moved} MB per frame"))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 6),
               fontsize=9, frameon=False)
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


#: Timeline colours by slice category (compute slices take their engine's colour).
TIMELINE_COLORS = {"memory": "#d6604d", "wait": "#f4f4f4", "CONV": "#2166ac", "SDP": "#4393c3",
                   "PDP": "#1b7837", "CDP": "#762a83", "BDMA": "#e08214",
                   "RUBIK": "#b35806"}
RUN_COLORS = ("#d9d9d9", "#bdbdbd")


def _load_trace(trace: Union[Dict[str, Any], str, Path]) -> Dict[str, Any]:
    return trace if isinstance(trace, dict) else json.loads(Path(trace).read_text())


def _run_window(slices: List[dict], runs) -> tuple:
    """(start, end) in µs of the runs selected: all (None), the first N (an int) or
    runs[first:stop] (a pair)."""
    run_slices = [e for e in slices if e.get("cat") == "run"]
    if not run_slices:
        return 0.0, 1.0
    first, stop = (0, len(run_slices)) if runs is None else \
        (0, runs) if isinstance(runs, int) else runs
    chosen = run_slices[first:stop] or run_slices
    return chosen[0]["ts"], chosen[-1]["ts"] + chosen[-1]["dur"]


def _timeline_panel(ax, trace: Dict[str, Any], runs, title: Optional[str], px_width: float,
                    span: Optional[float] = None) -> None:
    """One trace's lanes on ``ax`` (see :func:`plot_timeline`)."""
    events = trace["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    order = {e["tid"]: e["args"]["sort_index"] for e in events
             if e["name"] == "thread_sort_index"}
    tids = sorted(names, key=lambda tid: order.get(tid, tid))
    lane = {tid: i for i, tid in enumerate(tids)}
    slices = [e for e in events if e["ph"] == "X"]
    start, end = _run_window(slices, runs)
    eps = (end - start) * 1e-9
    slices = [e for e in slices if e["ts"] >= start - eps and e["ts"] < end - eps]
    shown_runs = [e for e in slices if e.get("cat") == "run"]
    span = span or end - start
    px_per_us = px_width / span
    for i, e in enumerate(shown_runs):
        ax.broken_barh([(e["ts"] - start, e["dur"])], (lane[e["tid"]] - 0.4, 0.8),
                       facecolor=RUN_COLORS[i % 2], edgecolor="white", linewidth=0.5)
        text = _short(e["name"])
        if e["dur"] * px_per_us > 4.6 * len(text) + 6:
            ax.text(e["ts"] - start + e["dur"] / 2, lane[e["tid"]], text, ha="center",
                    va="center", fontsize=7, clip_on=True)
    for e in slices:
        category = e.get("cat")
        if category == "run":
            continue
        color = TIMELINE_COLORS.get(category if category in ("memory", "wait")
                                    else e["args"].get("engine"), "#888888")
        wait = category == "wait"
        ax.broken_barh([(e["ts"] - start, e["dur"])], (lane[e["tid"]] - 0.35, 0.7),
                       facecolor=color, edgecolor="#999999" if wait else "white",
                       hatch="////" if wait else None, linewidth=0.4)
    ax.set_yticks(range(len(tids)), [names[tid] for tid in tids])
    ax.set_ylim(len(tids) - 0.5, -0.5)
    ax.set_xlim(0, span)
    ax.grid(axis="x", alpha=0.3)
    process = next((e["args"]["name"] for e in events if e["name"] == "process_name"), "")
    total = sum(e.get("cat") == "run" for e in events if e["ph"] == "X")
    what = f"{total} runs" if len(shown_runs) == total or not shown_runs else \
        (f"runs {shown_runs[0]['name'].split()[0]} to {shown_runs[-1]['name'].split()[0]} "
         f"of {total}")
    ax.set_title(f"{title + ': ' if title else ''}{what}, {end - start:,.1f} µs  —  {process}",
                 loc="left", fontsize=10)


def plot_timeline(trace: Union[Dict[str, Any], str, Path, List], path, runs=None,
                  titles: Optional[List[str]] = None, width: float = 15.0) -> Path:
    """One lane per track of a Chrome trace (``runs``, memory, each engine), its complete
    events as bars in simulated microseconds: compute in the engine's colour, memory traffic,
    and the hatched ``waits on memory`` slices. ``trace``: a trace dict or its JSON file, or a
    list of them (one panel each, on one time scale, e.g. fused above decomposed). ``runs``:
    every run (None), the first N (an int) or runs first..stop-1 (a pair) of each trace."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    traces = [_load_trace(t) for t in (trace if isinstance(trace, list) else [trace])]
    lanes = [sum(e["name"] == "thread_name" for e in t["traceEvents"]) for t in traces]
    spans = []
    for t in traces:
        start, end = _run_window([e for e in t["traceEvents"] if e["ph"] == "X"], runs)
        spans.append(end - start)
    fig, axes = plt.subplots(len(traces), 1, figsize=(width, 0.42 * sum(lanes) + 1.4 * len(traces)),
                             layout="constrained", squeeze=False,
                             gridspec_kw={"height_ratios": lanes})
    for i, (ax, t) in enumerate(zip(axes[:, 0], traces)):
        _timeline_panel(ax, t, runs, titles[i] if titles else None, width * 0.85 * 100,
                        max(spans))
    axes[-1, 0].set_xlabel("simulated time, µs")
    # The legend sits outside the panels, under them: inside, it covered the lanes' last
    # slices (the BDMA lane's only ones, on a model whose concats come last).
    fig.legend(handles=[Patch(facecolor=TIMELINE_COLORS["memory"], label="memory traffic"),
                        Patch(facecolor=TIMELINE_COLORS["wait"], edgecolor="#999999",
                              hatch="////", label="waits on memory")],
               loc="outside lower right", ncol=2, fontsize=8)
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_mixed_precision(search: Union[Dict[str, Any], Any], path, title: str = "") -> Path:
    """Output SQNR against simulated cycles along a mixed-precision search's path, from
    all-int8 to all-fp16 (``search``: a :class:`~accel_codegen.flows.mixed.
    MixedPrecision` or its JSON dict): the prediction at every point, the measurements where
    builds were made, the target, and the chosen assignment."""
    data = json.loads(search.to_json()) if hasattr(search, "to_json") else search
    points, base = data["path"], data["path"][0]["cycles"]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    ratio = [p["cycles"] / base for p in points]
    ax.plot(ratio, [p["predicted_sqnr_db"] for p in points], "-", color="#c2a5cf", lw=1,
            label="predicted (sum of the per-layer noise)")
    measured = [(r, p["sqnr_db"]) for r, p in zip(ratio, points) if p["sqnr_db"] is not None]
    ax.plot(*zip(*measured), "o", color="#1b7837", label="measured (a build)")
    chosen = points[data["chosen"]]
    ax.plot([chosen["cycles"] / base], [chosen["sqnr_db"]], "*", ms=16, color="#ee8a2a",
            label=f"chosen: {chosen['promoted']} of {len(points) - 1} layers fp16")
    ax.axhline(data["target_sqnr_db"], color="#8c8c8c", ls="--",
               label=f"target {data['target_sqnr_db']:g} dB")
    for r, p, text in ((ratio[0], points[0], "all-int8"), (ratio[-1], points[-1], "all-fp16")):
        ax.annotate(text, (r, p["sqnr_db"]), textcoords="offset points", xytext=(6, -12),
                    fontsize=9)
    ax.set_xlabel(f"simulated cycles / all-int8's ({base:,} cycles)")
    ax.set_ylabel("output SQNR against fp32, dB")
    ax.set_title(title or "Mixed int8/fp16: output SQNR against cycles along the search's path")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

"""The timeline of ResNet-18 on the simulated accelerator: Chrome traces of a fused and a
decomposed build's profiled runs (open them in ui.perfetto.dev or chrome://tracing) and our PNG
rendering of a window of both, on one time scale (by default out/trace_MODEL.png, beside
the traces; the README's picture is made with --png docs/trace_resnet18.png, the only way this
script writes under docs/).

    python examples/trace_resnet18.py [--model resnet18] [--config nv_full] [--runs 12 18]
                                      [--out-dir out] [--png out/trace_resnet18.png]

Runs 12..17 (f0.10b to f0.14b) show both kinds of run: compute-bound layers, where the CONV is
the long pole and the SDP finishes early, and memory-bound ones, where every engine waits on
the DRAM; the decomposed build runs the same layers op after op.
"""
from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", help="a zoo model name")
    parser.add_argument("--config", default="nv_full", help="a preset name")
    parser.add_argument("--runs", type=int, nargs=2, default=(12, 18), metavar=("FIRST", "STOP"),
                        help="the window of runs drawn: FIRST to STOP - 1 (0-based)")
    parser.add_argument("--out-dir", default="out", help="where to write the JSON traces")
    parser.add_argument("--png", default=None,
                        help="where to write the picture (default OUT_DIR/trace_MODEL.png)")
    args = parser.parse_args()

    import tvm

    import accel_codegen as ac
    from accel_codegen import frontend, models
    from accel_codegen.tools.plotting import plot_timeline

    model, inputs = models.get_model(args.model)
    mod, params = frontend.from_pytorch(model, inputs)
    x = tvm.runtime.tensor(inputs[0].numpy())
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    traces = []
    for fuse, name in ((True, "fused"), (False, "decomposed")):
        vm = ac.virtual_machine(ac.build(mod, params, config=args.config, fuse=fuse))
        with ac.profile() as prof:
            vm["main"](x)
        path = prof.to_chrome_trace(out / f"trace_{args.model}_{name}.json", config=args.config)
        traces.append(prof.chrome_trace(args.config))
        print(f"wrote {path}: {len(prof.records)} runs, {prof.totals['cycles']:,} cycles")
    png = plot_timeline(traces, args.png or out / f"trace_{args.model}.png", runs=tuple(args.runs),
                        titles=[f"{args.model} fused", f"{args.model} decomposed"])
    print(f"wrote {png} ({png.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()

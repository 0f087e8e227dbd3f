"""Accuracy of int8 and fp16 against fp32 on every zoo model: one table, and its JSON.

For each model and precision: calibration (int8) on random N(0, 1) inputs drawn with seed
1234, the build timed (calibration + partition + codegen + compile, up to a runnable VM), then
``accuracy_report`` on other random inputs (seed 1235) against the fp32 build of the same
partition: output SQNR, top-1 agreement, the worst accelerator tensor. The accuracy report
reuses the timed build's calibration, so both see the same scales. The same figures for one
model: ``accel-codegen accuracy MODEL --precision int8 --calibration 32 --inputs 16``.

    python examples/accuracy_zoo.py [--models lenet5 resnet18] [--precisions int8 fp16]
                                    [--calibration 32] [--inputs 16] [--out docs/accuracy_zoo]

Writes OUT.txt (the table) and OUT.json (the table's rows and every per-tensor figure).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
import warnings
from pathlib import Path


from accel_codegen.quantization import DEFAULT_METHOD
from accel_codegen.tables import Column, render_table
from accel_codegen.tools.model_spec import random_inputs

PRECISIONS = ("int8", "fp16")
CALIBRATION_SEED, EVALUATION_SEED = 1234, 1235
#: What the precisions are expected to reach; the table reports, it does not tune.
GOALS_DB = {"int8": 30.0, "fp16": 60.0}
REPO = Path(__file__).resolve().parents[1]


def measure(name: str, precision: str, args) -> dict:
    """One row: build (timed) and accuracy report of one model in one precision."""
    import accel_codegen as ac
    from accel_codegen import frontend, models

    model, (x,) = models.get_model(name)
    mod, _ = frontend.from_pytorch(model, (x,))
    calibration = random_inputs([x.numpy()], args.calibration, CALIBRATION_SEED) \
        if precision == "int8" else None
    start = time.perf_counter()
    partitioned = ac.partition_for_accel(mod, config=args.accel_config, precision=precision,
                                         calibration=calibration)
    ac.virtual_machine(ac.build(partitioned))  # the generated C compiled and linked
    build_s = time.perf_counter() - start
    evaluation = random_inputs([x.numpy()], args.inputs, EVALUATION_SEED)
    report = ac.accuracy_report(mod, None, evaluation,
                                config=args.accel_config, precision=precision,
                                calibration=ac.calibration_of(partitioned))
    worst = min(report.tensors, key=lambda t: t.sqnr_db)
    return {"model": name, "precision": precision, "output_sqnr_db": report.output_sqnr_db,
            "top1_agreement": report.top1_agreement, "worst_tensor_sqnr_db": worst.sqnr_db,
            "worst_tensor": f"{worst.key} op {worst.op_index} {worst.label.split(' ', 1)[-1]}",
            "calibration_build_s": build_s, "goal_db": GOALS_DB[precision],
            "meets_goal": report.output_sqnr_db >= GOALS_DB[precision],
            "host_ops": len(ac.partition_report(partitioned).host),
            "report": report.to_dict()}


COLUMNS = (Column("model", 13, "<"), Column("prec", 5, "<"), Column("output dB", 9, spec=".2f"),
           Column("top-1", 6), Column("worst dB", 8, spec=".2f"),
           Column("worst tensor", 44, "<", clip=True, gap="  "),
           Column("calib+build s", 13, spec=".2f"), Column("host ops", 8),
           Column("goal", 0, "<", gap="  "))


def format_table(rows: list, args) -> str:
    lines = [f"accuracy against fp32 on {args.config}: int8 calibrated ({DEFAULT_METHOD}) on "
             f"{args.calibration} random N(0, 1) inputs (seed {CALIBRATION_SEED}), evaluation "
             f"on {args.inputs} other random inputs (seed {EVALUATION_SEED}); goals: "
             + ", ".join(f"{p} >= {g:g} dB" for p, g in GOALS_DB.items())]
    rows = [f"{r['model']:<13} {r['precision']:<5} error: {r['error']}" if "error" in r else
            [r["model"], r["precision"], r["output_sqnr_db"],
             "-" if r["top1_agreement"] is None else f"{r['top1_agreement'] * 100:5.1f}%",
             r["worst_tensor_sqnr_db"], r["worst_tensor"], r["calibration_build_s"],
             r["host_ops"], "met" if r["meets_goal"] else "below"] for r in rows]
    lines.append(render_table(COLUMNS, rows))
    return "\n".join(lines)


def _commit() -> str:
    """The repository's commit (with "+changes" for a dirty tree), or "" outside git."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty=+changes"], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def main() -> None:
    from accel_codegen.models import MODELS

    # torch.export's own deprecation noise
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)",
                            category=FutureWarning)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS),
                        metavar="MODEL", help=f"zoo models (default: all: {' '.join(MODELS)})")
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS),
                        help="int8 and/or fp16 (default: both)")
    parser.add_argument("--calibration", type=int, default=32,
                        help="random calibration inputs of int8 (32)")
    parser.add_argument("--inputs", type=int, default=16, help="evaluation inputs (16)")
    parser.add_argument("--config", default="nv_full",
                        help="a preset (nv_full), a config JSON file or JSON text")
    parser.add_argument("--out", default=str(REPO / "docs" / "accuracy_zoo"),
                        help="writes OUT.txt and OUT.json (default docs/accuracy_zoo)")
    args = parser.parse_args()
    if args.calibration < 1 or args.inputs < 1:
        parser.error("--calibration and --inputs must be at least 1")

    from accel_codegen import AccelError
    from accel_codegen.config_files import resolve_config

    try:
        args.accel_config = resolve_config(args.config)
    except AccelError as error:
        parser.error(f"--config: {error}")

    rows = []
    for name in args.models:
        for precision in args.precisions:
            start = time.perf_counter()
            try:
                rows.append(measure(name, precision, args))
            except AccelError as error:  # one model's failure is a row, not the end of the run
                rows.append({"model": name, "precision": precision, "error": str(error)})
            print(f"{name} {precision}: {time.perf_counter() - start:.1f} s", flush=True)
    table = format_table(rows, args)
    print(table)
    out = Path(args.out)
    out.with_suffix(".txt").write_text(table + "\n")
    out.with_suffix(".json").write_text(json.dumps({
        "config": args.config, "goals_db": GOALS_DB,
        "calibration": {"inputs": args.calibration, "seed": CALIBRATION_SEED,
                        "method": DEFAULT_METHOD, "distribution": "N(0, 1)"},
        "evaluation": {"inputs": args.inputs, "seed": EVALUATION_SEED},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "commit": _commit(),
        "rows": rows}, indent=1))
    print(f"wrote {out.with_suffix('.txt')} and {out.with_suffix('.json')}")


if __name__ == "__main__":
    main()

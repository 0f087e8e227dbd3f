"""The compiler's int8 programs that were played on NVDLA's nv_small RTL (issue 31): a few single
layers run on the nv_small device and LeNet-5 compiled by ``accel-codegen export-nvdla``, each
written as NVDLA trace tests. Every operand comes from a fixed seed, so the same tests (the same
bits, the same CRCs) are written every time: ``docs/nvdla_rtl_exports.json`` records what the
RTL gave on them, and tests/tools/test_nvdla_rtl_exports.py re-exports them to check the
simulator still computes the RTL-verified CRCs and estimates cycles within 15 % of the RTL's.

    python examples/nvdla_rtl_exports.py DIR     # writes DIR/<test>/<test>.cfg (+ .dat)
    python examples/nvdla_rtl_play.py play --hw HW DIR    # plays them on the RTL testbench
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np

from accel_codegen.sim.device import Device
from accel_codegen.sim.ops import Conv, Pool, Sdp
from accel_codegen.sim.recorder import recording
from accel_codegen.tools.nvdla_export import ExportedTest, export_run

# LeNet-5 as `accel-codegen export-nvdla examples/lenet5_rtl.py:lenet5_rtl --config nv_small
# --precision int8 --calibration 4 -o DIR --prefix lenet5` writes it (the CLI's own seed,
# 1234): the weights the RTL ran (examples/lenet5_rtl.py says why they are not the zoo's)
LENET5_ARGS = ("export-nvdla", str(Path(__file__).with_name("lenet5_rtl.py")) + ":lenet5_rtl",
               "--config", "nv_small", "--precision", "int8", "--calibration", "4",
               "--prefix", "lenet5")


def _layers(seed: int) -> Dict[str, Callable[[], Tuple[list, np.ndarray]]]:
    rng = np.random.default_rng(seed)

    def codes(shape, low=-128, high=128):
        return rng.integers(low, high, size=shape).astype(np.int8)

    def sdp(channels, *, in_zero=0, act="relu", out_zero=-128, shifts=(20, 23)):
        return Sdp(precision="int8", bias=rng.integers(-3000, 3000, channels).astype(np.int32),
                   mul=rng.integers(16384, 32767, channels).astype(np.int16),
                   rshift=rng.integers(shifts[0], shifts[1] + 1, channels).astype(np.uint8),
                   in_zero=in_zero, act=act, out_zero=out_zero)

    return {
        # 3x3 'same' convolution, 3 -> 10 channels (neither a whole atom), an input zero point
        # (NVDLA's pad value), per-channel shifts, ReLU, 2x2 max pooling on the fly
        "conv_relu_pool": lambda: ([Conv(weights=codes((10, 3, 3, 3), -127), padding=(1, 1, 1, 1),
                                         precision="int8", in_zero=-5),
                                    sdp(10), Pool(kind="max", kernel=2, stride=2,
                                                  precision="int8")],
                                   codes((1, 3, 9, 12))),
        # strided, dilated, asymmetrically padded 5x3 convolution, an output zero point
        "conv_strided_dilated": lambda: ([Conv(weights=codes((16, 12, 5, 3), -127),
                                               stride=(2, 1), dilation=(1, 2),
                                               padding=(2, 0, 1, 3), precision="int8",
                                               in_zero=17),
                                          sdp(16, act=None, out_zero=7)],
                                         codes((1, 12, 11, 9))),
        # 3x3 convolution of 64 -> 32 channels on 12x10: several kernel groups and weight blocks
        "conv_64x32": lambda: ([Conv(weights=codes((32, 64, 3, 3), -127), padding=(1, 1, 1, 1),
                                     precision="int8", in_zero=3), sdp(32, shifts=(22, 24))],
                               codes((1, 64, 10, 12))),
        # a fully connected layer (1x1 convolution on a 1x1 input)
        "dense": lambda: ([Conv(weights=codes((12, 40, 1, 1), -127), precision="int8",
                                in_zero=-128), sdp(12, act=None, out_zero=0)],
                          codes((1, 40, 1, 1))),
        # an SDP reading memory and a 3x3 stride-2 padded max pool on the fly
        "sdp_pool": lambda: ([sdp(20, in_zero=3, shifts=(14, 16)),
                              Pool(kind="max", kernel=3, stride=2, padding=1, precision="int8")],
                             codes((1, 20, 7, 10))),
        # the PDP alone: max and a padded average (NVDLA's reciprocals)
        "pool": lambda: ([Pool(kind="max", kernel=(2, 3), stride=(2, 1), precision="int8")],
                         codes((1, 9, 6, 7))),
        "avg_pool": lambda: ([Pool(kind="avg", kernel=(2, 5), stride=(2, 3),
                                   padding=(1, 2, 0, 1), count_include_pad=True,
                                   precision="int8", zero=-7)],
                             codes((1, 11, 7, 13))),
    }


LAYER_NAMES = tuple(_layers(0))


def export_layer(name: str, directory: str) -> ExportedTest:
    """Run one of the single layers on the nv_small device (its operands from a seed of its
    own) and write it as the trace test ``directory/name``."""
    seed = 3100 + LAYER_NAMES.index(name)
    ops, x = _layers(seed)[name]()
    with recording() as runs:
        y, _ = Device("nv_small").run(ops, x, label=name)
    assert len(runs) == 1 and np.array_equal(runs[0].output, y)
    return export_run(runs[0], directory, name)


def export_all(directory: str) -> List[Tuple[str, int, int]]:
    """Write every test (the single layers, then LeNet-5 through the CLI); (name, CRC,
    estimated cycles) of each."""
    from accel_codegen.tools import cli

    rows = [(t.name, t.crc, t.cycles) for t in (export_layer(n, directory) for n in LAYER_NAMES)]
    out = _capture(lambda: cli.main([*LENET5_ARGS, "-o", directory]))
    rows += parse_cli_lines(out)
    return rows


def parse_cli_lines(text: str) -> List[Tuple[str, int, int]]:
    """(name, CRC, cycles) of each test export-nvdla printed."""
    rows = []
    for line in text.splitlines():
        if ".cfg crc 0x" in line and " cycles estimated" in line:
            name = line.split(":", 1)[0]
            crc = int(line.split(" crc ", 1)[1].split(",", 1)[0], 16)
            cycles = int(line.split(", ", 1)[1].split(" cycles", 1)[0].replace(",", ""))
            rows.append((name, crc, cycles))
    return rows


def _capture(call) -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        status = call()
    if status:
        raise SystemExit(f"export-nvdla failed ({status}):\n{buf.getvalue()}")
    return buf.getvalue()


RECORD = Path(__file__).resolve().parents[1] / "docs" / "nvdla_rtl_exports.json"


def record(tsv: str, commit: str) -> None:
    """docs/nvdla_rtl_exports.json from what examples/nvdla_rtl_play.py's --tsv wrote for these
    tests, and the table docs/nvdla_rtl.md shows (printed)."""
    lines = Path(tsv).read_text().splitlines()
    header = lines[0].split("\t")
    rows = [dict(zip(header, line.split("\t"))) for line in lines[1:]]
    tests = [{"test": r["test"], "rtl_verdict": r["rtl_verdict"], "rtl_crc": r["rtl_crc"],
              "sim_crc": r["sim_crc"], "rtl_cycles_last_write": int(r["rtl_cycles_last_write"]),
              "rtl_cycles_interrupt": int(r["rtl_cycles_interrupt"]),
              "estimate": int(r["estimate"])} for r in rows]
    RECORD.write_text(json.dumps({
        "what": "the exported tests of examples/nvdla_rtl_exports.py played on NVDLA's nv_small "
                "RTL (examples/nvdla_rtl_play.py)", "commit": commit, "tests": tests},
        indent=1) + "\n")
    print("| test | RTL cycles (last write) | estimate | error | CRC on RTL | simulator's CRC |")
    print("|---|---|---|---|---|---|")
    for t in tests:
        rtl, est = t["rtl_cycles_last_write"], t["estimate"]
        same = "equal" if t["rtl_crc"] == t["sim_crc"] else "DIFFERENT"
        print(f"| {t['test']} | {rtl:,} | {est:,} | {100 * (est - rtl) / rtl:+.1f} % | "
              f"{t['rtl_crc']} ({t['rtl_verdict']}) | {same} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", nargs="?", help="where to write the trace tests")
    parser.add_argument("--record", metavar="TSV", help="write docs/nvdla_rtl_exports.json from "
                                                        "nvdla_rtl_play.py's --tsv output")
    parser.add_argument("--commit", default="", help="with --record: the commit exported")
    args = parser.parse_args(argv)
    if args.record:
        record(args.record, args.commit)
        return 0
    if not args.directory:
        parser.error("give DIR (or --record TSV)")
    for name, crc, cycles in export_all(args.directory):
        print(f"{name}\t{crc:#010x}\t{cycles}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

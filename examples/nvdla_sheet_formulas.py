"""NVDLA's performance spreadsheet re-evaluated from its own cell formulas, with the two layer
simplifications its ResNet50 sheet makes as switches (docs/nvdla_validation.md). The
spreadsheet's arithmetic, not our cost model: it shows what its figure would be with NVDLA's
documented behaviour in their place, to compare with ours like with like.

- *stride folding*: the sheet computes every strided convolution as stride 1 over C x s^2
  channels with a ceil(R/s) x ceil(S/s) kernel (4x the weights of a strided 1x1). NVDLA folds
  the stride so for Winograd only; the image-input stem packs its pixels its own way, so the
  stem keeps the sheet's folded row in the unfolded variant.
- *Winograd*: the sheet runs every 3x3 in Winograd mode (MAC cycles / 2.25, weights x 16/9),
  including DRAM-bound layers that it makes slower; the variant takes the cheaper mode per
  layer, as our code generator does.

The published total must come out when both are as the sheet has them (checked). Also prints
the GoogLeNet sheet's three 1x1 convolutions per Inception module, separate and merged.

    git clone https://github.com/nvdla/hw   # hw/perf/NVDLA_OpenSource_Performance.xlsx
    python examples/nvdla_sheet_formulas.py hw/perf/NVDLA_OpenSource_Performance.xlsx
"""
from __future__ import annotations

import argparse
import math
import re
import zipfile
import xml.etree.ElementTree as ET

_NS = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_REL = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
# The configuration sheet's cells the layer sheets read: bytes per element, CBUF KiB, MACs,
# MHz, DRAM GB/s, FC batch.
DATA_BYTES, CBUF_KB, MACS, MHZ, DRAM_GBPS, FC_BATCH = 1, 512, 2048, 1000, 10, 16
PUBLISHED_RESNET50_CYCLES = 7_113_691


def read_sheet(path: str, name: str) -> dict:
    """{row: {column: stored value}} of one worksheet (the values Excel last computed)."""
    with zipfile.ZipFile(path) as book:
        strings = ["".join(t.text or "" for t in si.iter(_NS + "t")) for si in
                   ET.fromstring(book.read("xl/sharedStrings.xml")).iter(_NS + "si")]
        targets = {r.get("Id"): r.get("Target") for r in
                   ET.fromstring(book.read("xl/_rels/workbook.xml.rels"))}
        sheets = {s.get("name"): targets[s.get(_REL)] for s in
                  ET.fromstring(book.read("xl/workbook.xml")).iter(_NS + "sheet")}
        root = ET.fromstring(book.read("xl/" + sheets[name]))
    rows: dict = {}
    for cell in root.iter(_NS + "c"):
        value = cell.find(_NS + "v")
        if value is None:
            continue
        text = strings[int(value.text)] if cell.get("t") == "s" else value.text
        column, row = re.match(r"([A-Z]+)(\d+)", cell.get("r")).groups()
        rows.setdefault(int(row), {})[column] = text
    return rows


def _up(a: float, b: float) -> float:  # Excel's CEILING(a, b)
    return math.ceil(a / b) * b


def resnet50_row(cells: dict, fold: bool, winograd: bool) -> float:
    """One row of the ResNet50 sheet, its columns AO (DRAM traffic, KiB), AQ (DRAM cycles), AR
    (MAC cycles) and AS (their long pole), as its formulas compute them; ``fold``: the
    stride folded into channels; ``winograd``: a 3x3 in Winograd mode."""
    num = lambda col: float(cells.get(col) or 0)  # noqa: E731
    c, h, w, k, r, s, pad, sh, sw = (num(col) for col in "EFGHIJKLM")
    kind, pool = cells["D"], num("P")
    out_h = math.ceil(h / sh) if pad else math.ceil((h - r) / sh) + 1
    out_w = math.ceil(w / sw) if pad else math.ceil((w - s) / sw) + 1
    if pool:
        out_h = math.ceil((out_h - num("Q")) / num("S")) + 1
        out_w = math.ceil((out_w - num("R")) / num("T")) + 1
    fh, fw = (sh, sw) if fold else (1, 1)
    channels = _up(c * fh * fw, 16)
    x = channels * math.ceil(h / fh) * math.ceil(w / fw) * DATA_BYTES / 1024
    x_min = channels * min(r, math.ceil(h / fh)) * math.ceil(w / fw) * DATA_BYTES / 1024
    z = out_h * out_w * _up(k, 16) * DATA_BYTES / 1024
    w_min = channels * math.ceil(r / fh) * math.ceil(s / fw) * 32 * DATA_BYTES / 1024
    w_min = CBUF_KB / 2 if w_min >= CBUF_KB else w_min
    weights = channels * math.ceil(r / fh) * math.ceil(s / fw) * k * DATA_BYTES / 1024 \
        * (16 / 9 if winograd else 1)
    if x >= weights:  # column AN: "weight" (the weights are the smaller)
        traffic = (math.ceil(weights / (CBUF_KB - x_min)) * x if weights > CBUF_KB - x_min
                   else x) + weights + z
    else:
        traffic = (math.ceil(x / (CBUF_KB - w_min)) * weights if x > CBUF_KB - w_min
                   else weights) + x + z
    traffic += z if kind == "conv + elwise" else 0
    dram = math.ceil(traffic / DRAM_GBPS * MHZ)
    fc = FC_BATCH if kind == "fc" else 1
    kernel = (r / sh) * (s / sw) if fold else r * s
    mac = channels * math.ceil((h if pad else h - r + 1) / sh) \
        * math.ceil((w if pad else w - s + 1) / sw) * _up(k * fc, 128) * kernel / MACS \
        / (2.25 if winograd else 1) / fc
    return max(dram, mac)


def resnet50_total(rows: dict, fold: bool, winograd: str) -> float:
    """The ResNet50 sheet's total cycles (rows 11-64); ``winograd``: "all" 3x3 layers (the
    sheet), "cheaper" (per layer, the faster mode) or "off"; the stem (row 11) folded always
    when ``fold`` is off (image input)."""
    total = 0.0
    for row in range(11, 65):
        cells = rows[row]
        is_3x3 = cells["I"] == cells["J"] == "3"
        row_fold = fold or row == 11
        modes = {"all": [is_3x3], "off": [False], "cheaper": [False, True] if is_3x3 else [False]}
        total += min(resnet50_row(cells, row_fold, mode) for mode in modes[winograd])
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("xlsx", help="NVDLA_OpenSource_Performance.xlsx (nvdla/hw, perf/)")
    args = parser.parse_args()

    rows = read_sheet(args.xlsx, "ResNet50")
    published = resnet50_total(rows, fold=True, winograd="all")
    if round(published) != PUBLISHED_RESNET50_CYCLES:
        raise SystemExit(f"the ResNet50 sheet's formulas give {published:,.0f} cycles, not the "
                         f"published {PUBLISHED_RESNET50_CYCLES:,}: another version of the sheet?")
    print("ResNet50 sheet, total cycles (ms at 1 GHz)")
    for fold in (True, False):
        for winograd in ("all", "cheaper", "off"):
            total = resnet50_total(rows, fold, winograd)
            print(f"  stride folded: {'every conv' if fold else 'stem only':<10}  "
                  f"Winograd: {winograd:<7}  {total:>11,.0f}  ({total / 1e6:.3f} ms)")
    rows = read_sheet(args.xlsx, "GoogLeNet")
    separate = merged = 0.0
    for cells in rows.values():
        name = cells.get("C", "").lower()
        if "combined" in name:
            merged += float(cells["AS"])
        elif "AS" not in cells and any(t in name for t in ("1x1", "3x3 red", "5x5 red")):
            separate += float(cells["AQ"])
    print(f"GoogLeNet sheet, the three 1x1 convolutions of the 9 modules: {separate:,.0f} "
          f"cycles as separate rows (not summed by the sheet), {merged:,.0f} merged (summed)")


if __name__ == "__main__":
    main()

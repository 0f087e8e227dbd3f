"""Our cost model beside NVDLA's performance spreadsheet (hw/perf/NVDLA_OpenSource_Performance.xlsx
in nvdla/hw): AlexNet and GoogLeNet as published (with local response normalisation), ResNet-50
as the spreadsheet lists it (Caffe's, ``resnet50_caffe``) and torchvision's, and AlexNet with 4 MB
of SRAM; int8, 2048 MACs, 512 KiB CBUF, 1 GHz, DRAM 10 GB/s, the fully connected layers at the
batch each network's sheet uses. Three figures per network (accel_codegen/tools/spreadsheet.py):
ours in full (every run), the runs the spreadsheet lists, and those runs under the spreadsheet's
assumptions (each the long pole of its MAC, DRAM and SRAM cycles; pools, scaling and element-wise
work free). The results are in docs/nvdla_validation.md.

    python examples/nvdla_spreadsheet.py [--layers] [--models alexnet_lrn ...] [--no-sram]
"""
from __future__ import annotations

import argparse

MODELS = ["alexnet_lrn", "googlenet_lrn", "resnet50_caffe", "resnet50"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--no-sram", action="store_true", help="skip AlexNet + 4 MB SRAM")
    parser.add_argument("--layers", action="store_true", help="print every run's cycles per frame")
    args = parser.parse_args()

    from accel_codegen.tools import spreadsheet

    config = spreadsheet.spreadsheet_config()
    print(f"configuration: {config.atomic_c}x{config.atomic_k} MACs, "
          f"{config.cbuf_bytes // 1024} KiB CBUF, {config.clock_hz / 1e9:g} GHz, "
          f"{config.dram_bytes_per_s / 1e9:g} GB/s DRAM, int8")
    print(f"{'model':<22} {'FC batch':>8} {'sheet ms':>8} {'ours full':>10} {'diff':>7} "
          f"{'ours counted':>12} {'diff':>7} {'ours, sheet rules':>17} {'diff':>7}")
    rows = [(name, name, config, spreadsheet.SPREADSHEET_MS[name]) for name in args.models]
    if not args.no_sram:
        rows.append(("alexnet_lrn + 4 MB SRAM", "alexnet_lrn",
                     spreadsheet.spreadsheet_sram_config(), spreadsheet.SPREADSHEET_SRAM_MS))
    for title, name, cfg, sheet in rows:
        frame = spreadsheet.per_frame(name, cfg)
        figures = "".join(f" {ms:>{width}.3f} {spreadsheet.difference(ms, sheet):>+7.1%}"
                          for ms, width in ((frame.all_ms, 10), (frame.counted_ms, 12),
                                            (frame.sheet_ms, 17)))
        print(f"{title:<22} {frame.fc_batch:>8} {sheet:>8.3f}{figures}")
        if args.layers:
            for layer in frame.layers:
                mark = "" if layer.counted else "  (not counted by the spreadsheet)"
                print(f"    {layer.label:<48} {layer.engines:<22} {layer.cycles:>11,.0f} "
                      f"{layer.long_pole:>11,.0f}{mark}")


if __name__ == "__main__":
    main()

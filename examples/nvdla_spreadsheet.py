"""Our cost model beside NVDLA's performance spreadsheet (hw/perf/NVDLA_OpenSource_Performance.xlsx
in nvdla/hw): AlexNet and GoogLeNet as published (with local response normalisation) and
ResNet-50, int8, 2048 MACs, 512 KiB CBUF, 1 GHz, DRAM 10 GB/s, fully connected layers at batch
16 (see accel_codegen/tools/spreadsheet.py for how a frame is counted). The results are in
docs/nvdla_validation.md.

    python examples/nvdla_spreadsheet.py [--layers] [--models alexnet_lrn googlenet_lrn resnet50]
"""
from __future__ import annotations

import argparse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["alexnet_lrn", "googlenet_lrn", "resnet50"])
    parser.add_argument("--layers", action="store_true", help="print every run's cycles per frame")
    args = parser.parse_args()

    from accel_codegen.sim.config import AccelConfig
    from accel_codegen.tools import spreadsheet

    config = spreadsheet.spreadsheet_config()
    print(f"configuration: {config.atomic_c}x{config.atomic_k} MACs, "
          f"{config.cbuf_bytes // 1024} KiB CBUF, {config.clock_hz / 1e9:g} GHz, "
          f"{config.dram_bytes_per_s / 1e9:g} GB/s DRAM, int8, FC batch {spreadsheet.FC_BATCH}")
    print(f"{'model':<15} {'spreadsheet ms':>14} {'ours (counted) ms':>18} {'diff':>7} "
          f"{'ours (all runs) ms':>19} {'diff':>7}")
    for name in args.models:
        frame = spreadsheet.per_frame(name, config)
        sheet = spreadsheet.SPREADSHEET_MS[name]
        print(f"{name:<15} {sheet:>14.3f} {frame.counted_ms:>18.3f} "
              f"{spreadsheet.difference(frame.counted_ms, sheet):>+7.1%} {frame.all_ms:>19.3f} "
              f"{spreadsheet.difference(frame.all_ms, sheet):>+7.1%}")
        if args.layers:
            for layer in frame.layers:
                mark = "" if layer.counted else "  (not counted by the spreadsheet)"
                print(f"    {layer.label:<52} {layer.engines:<22} {layer.cycles:>12,.0f}{mark}")
    if "sram_bytes" in AccelConfig.preset("nv_full").to_dict():
        frame = spreadsheet.per_frame("alexnet_lrn", spreadsheet.spreadsheet_config(
            sram_bytes=4 * 1024 * 1024))
        sheet = spreadsheet.SPREADSHEET_SRAM_MS
        print(f"{'alexnet + 4 MB SRAM':<15} {sheet:>14.3f} {frame.counted_ms:>18.3f} "
              f"{spreadsheet.difference(frame.counted_ms, sheet):>+7.1%} {frame.all_ms:>19.3f} "
              f"{spreadsheet.difference(frame.all_ms, sheet):>+7.1%}")
    else:
        print("alexnet + 4 MB SRAM: not measurable (the configuration has no sram_bytes field)")


if __name__ == "__main__":
    main()

"""Our cost model beside NVDLA's public performance spreadsheet (hw/perf/
NVDLA_OpenSource_Performance.xlsx in the nvdla/hw repository): its configuration, its four
published figures, and our per-frame figures counted its way.

The spreadsheet's configuration: int8, 2048 MACs (atomic C 64 x K 32: nv_full's array), 512 KiB
CBUF, 1 GHz, DRAM 10 GB/s, fully connected layers at batch 16. Its stated assumptions: no
software overhead; pooling, scaling and element-wise ops fused with the convolutions at no
cost; per layer, the long pole of DRAM, SRAM and MAC cycles. Our figure per frame
(:func:`per_frame`): every layer of a batch-1 estimate, except the fully connected ones, which
come from a batch-16 estimate (multi-batch mode) divided by 16. The spreadsheet lists
convolution and fully connected layers only, so the runs without a CONV (a standalone pool, the
SDP passes and host operators of a decomposed local response norm, copies) are what it counts
as free; ``counted_ms`` leaves them out, ``all_ms`` keeps them (docs/nvdla_validation.md).
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

from ..errors import AccelError
from ..sim.config import AccelConfig
from .estimation import LayerEstimate, estimate

#: The spreadsheet's "Performance Summary": ms per frame.
SPREADSHEET_MS = {"alexnet_lrn": 0.895, "googlenet_lrn": 1.222, "resnet50": 7.114}
#: AlexNet with 4 MB of on-chip SRAM on the second memory interface (25 GB/s each way).
SPREADSHEET_SRAM_MS = 0.591
#: The spreadsheet's fully connected batch.
FC_BATCH = 16


def spreadsheet_config(**fields) -> AccelConfig:
    """nv_full (int8 64 x 32, 512 KiB CBUF, 1 GHz) with the spreadsheet's 10 GB/s DRAM;
    ``fields`` replace more (e.g. ``sram_bytes``)."""
    return AccelConfig.preset("nv_full").replace(name="nvdla_spreadsheet",
                                                 dram_bytes_per_s=10e9, **fields)


@dataclasses.dataclass(frozen=True)
class FrameLayer:
    """One run of a frame: its cycles per frame, and whether the spreadsheet counts it."""

    label: str
    engines: str
    cycles: float
    counted: bool  # a run with a CONV: the spreadsheet's layers


@dataclasses.dataclass(frozen=True)
class FrameEstimate:
    model: str
    layers: List[FrameLayer]
    clock_hz: float

    @property
    def all_ms(self) -> float:
        """Every run of a frame."""
        return sum(layer.cycles for layer in self.layers) / self.clock_hz * 1e3

    @property
    def counted_ms(self) -> float:
        """The runs the spreadsheet counts (those with a CONV)."""
        return sum(layer.cycles for layer in self.layers if layer.counted) / self.clock_hz * 1e3


def _is_fc(layer: LayerEstimate) -> bool:
    return "CONV(batch)" in layer.engines


def per_frame(model_name: str, config: Optional[AccelConfig] = None,
              fc_batch: int = FC_BATCH) -> FrameEstimate:
    """A zoo model's int8 cost per frame as the spreadsheet counts it (module docstring)."""
    from accel_codegen import frontend, models  # torch: imported only when used

    config = config or spreadsheet_config()
    reports: Dict[int, object] = {}
    for batch in (1, fc_batch):
        model, inputs = models.get_model(model_name, batch=batch)
        mod, params = frontend.from_pytorch(model, inputs)
        reports[batch] = estimate(mod, params, config=config, precision="int8")
    single = reports[1].layers
    # The fully connected layers come from the batched estimate, in order. Only they are paired:
    # the rest of a batch may partition otherwise (an int8 concat runs at batch 1 only).
    batched_fc = [layer for layer in reports[fc_batch].layers if _is_fc(layer)]
    single_fc = [i for i, layer in enumerate(single) if "dense" in layer.primitive.split("_")
                 or layer.primitive.startswith("accel.dense")]
    if len(batched_fc) != len(single_fc):
        raise AccelError(f"{model_name}: {len(single_fc)} fully connected layers at batch 1, "
                         f"{len(batched_fc)} in multi-batch mode at batch {fc_batch}")
    fc_at = dict(zip(single_fc, batched_fc))
    layers = []
    for i, one in enumerate(single):
        many = fc_at.get(i)
        layers.append(FrameLayer(one.label, many.engines if many else one.engines,
                                 many.cycles / fc_batch if many else float(one.cycles),
                                 "CONV" in one.engines))
    return FrameEstimate(model_name, layers, config.clock_hz)


def difference(ours_ms: float, sheet_ms: float) -> float:
    """Our figure against the spreadsheet's, as a fraction (+0.05: 5 % slower)."""
    return ours_ms / sheet_ms - 1.0

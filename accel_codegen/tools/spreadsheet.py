"""Our cost model beside NVDLA's public performance spreadsheet (hw/perf/
NVDLA_OpenSource_Performance.xlsx in the nvdla/hw repository): its configuration, its four
published figures, and our per-frame figures, counted three ways.

The spreadsheet's configuration: int8, 2048 MACs (atomic C 64 x K 32: nv_full's array), 512 KiB
CBUF, 1 GHz, DRAM 10 GB/s. Its stated assumptions: no software overhead; pooling, scaling and
element-wise ops fused with the convolutions at no cost; per layer, the long pole of DRAM, SRAM
and MAC cycles; fully connected layers at batch 16, which its formulas apply on the AlexNet sheet
only (the GoogLeNet and ResNet50 sheets read the classifier's weights every frame:
:data:`SHEET_FC_BATCH`).

Our frame (:func:`per_frame`): every run of a batch-1 int8 estimate, except the fully connected
ones, which come from an estimate at the sheet's FC batch (multi-batch mode) divided by it.
Counted three ways (docs/nvdla_validation.md):

* ``all_ms``: every accelerator run (host operators are not costed): our full figure;
* ``counted_ms``: the runs with a CONV, whole: the spreadsheet lists convolution and fully
  connected layers only, so a standalone pool, the passes of a decomposed local response norm,
  concat copies are what it counts as free;
* ``sheet_ms``: the spreadsheet's accounting, under its own assumptions: the runs with a CONV,
  each costing the long pole of its MAC, DRAM and SRAM cycles (an SDP or PDP fused into the run
  costs no cycles of its own; an element-wise operand still costs its bytes). The same C cost
  model's figures, only summed as the spreadsheet sums.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

from ..errors import AccelError
from ..sim.config import AccelConfig
from .estimation import LayerEstimate, estimate

#: The spreadsheet's "Performance Summary": ms per frame. Caffe's ResNet-50 (the network the
#: ResNet50 sheet lists) is the zoo's ``resnet50_caffe``; ``resnet50`` is torchvision's.
SPREADSHEET_MS = {"alexnet_lrn": 0.895, "googlenet_lrn": 1.222, "resnet50": 7.114,
                  "resnet50_caffe": 7.114}
#: AlexNet with 4 MB of on-chip SRAM on the second memory interface.
SPREADSHEET_SRAM_MS = 0.591
#: The spreadsheet's SRAM bandwidth ("CVSRAM read / write BW limitation"): 25 GB/s each way. Our
#: secondary memory has one port for both; it gets their sum.
SPREADSHEET_SRAM_BYTES_PER_S = 25e9 + 25e9
#: The fully connected batch of the configuration sheet.
FC_BATCH = 16
#: The batch each network's sheet applies to its fully connected layers' weight traffic: the
#: AlexNet sheet divides it by the FC batch, the GoogLeNet and ResNet50 sheets' DRAM traffic
#: columns do not (GoogLeNet's classifier: 100,199 cycles, its 1 MB of weights at 10 GB/s).
SHEET_FC_BATCH = {"alexnet_lrn": FC_BATCH, "googlenet_lrn": 1, "resnet50": 1,
                  "resnet50_caffe": 1}


def spreadsheet_config(**fields) -> AccelConfig:
    """nv_full (int8 64 x 32, 512 KiB CBUF, 1 GHz) with the spreadsheet's 10 GB/s DRAM;
    ``fields`` replace more (e.g. ``sram_bytes``)."""
    return AccelConfig.preset("nv_full").replace(name="nvdla_spreadsheet",
                                                 dram_bytes_per_s=10e9, **fields)


def spreadsheet_sram_config(sram_bytes: int = 4 * 1024 * 1024) -> AccelConfig:
    """The spreadsheet's SRAM case: :func:`spreadsheet_config` with ``sram_bytes`` of
    secondary memory at its bandwidth (:data:`SPREADSHEET_SRAM_BYTES_PER_S`)."""
    return spreadsheet_config(sram_bytes=sram_bytes,
                              sram_bytes_per_s=SPREADSHEET_SRAM_BYTES_PER_S)


@dataclasses.dataclass(frozen=True)
class FrameLayer:
    """One run of a frame: its cycles per frame, its long pole of MAC, DRAM and SRAM cycles per
    frame, and whether the spreadsheet counts it."""

    label: str
    engines: str
    cycles: float
    long_pole: float
    counted: bool  # a run with a CONV: the spreadsheet's layers


@dataclasses.dataclass(frozen=True)
class FrameEstimate:
    model: str
    layers: List[FrameLayer]
    clock_hz: float
    fc_batch: int

    def _ms(self, cycles: float) -> float:
        return cycles / self.clock_hz * 1e3

    @property
    def all_ms(self) -> float:
        """Every run of a frame: our full figure."""
        return self._ms(sum(layer.cycles for layer in self.layers))

    @property
    def counted_ms(self) -> float:
        """The runs the spreadsheet lists (those with a CONV), whole."""
        return self._ms(sum(layer.cycles for layer in self.layers if layer.counted))

    @property
    def sheet_ms(self) -> float:
        """The spreadsheet's accounting: its runs, each at the long pole of MAC, DRAM and SRAM
        cycles (pooling, scaling and element-wise work fused at no cost)."""
        return self._ms(sum(layer.long_pole for layer in self.layers if layer.counted))


def _is_fc(layer: LayerEstimate) -> bool:
    return "CONV(batch)" in layer.engines


def _long_pole(layer: LayerEstimate) -> int:
    return max(layer.mac_cycles, layer.memory_cycles, layer.sram_cycles)


def per_frame(model_name: str, config: Optional[AccelConfig] = None,
              fc_batch: Optional[int] = None) -> FrameEstimate:
    """A zoo model's int8 cost per frame as the spreadsheet counts it (module docstring);
    ``fc_batch`` defaults to the network's sheet's (:data:`SHEET_FC_BATCH`, else
    :data:`FC_BATCH`)."""
    from accel_codegen import frontend, models  # torch: imported only when used

    config = config or spreadsheet_config()
    fc_batch = fc_batch or SHEET_FC_BATCH.get(model_name, FC_BATCH)
    reports: Dict[int, object] = {}
    for batch in sorted({1, fc_batch}):
        model, inputs = models.get_model(model_name, batch=batch)
        mod, params = frontend.from_pytorch(model, inputs)
        reports[batch] = estimate(mod, params, config=config, precision="int8")
    single = reports[1].layers
    fc_at: Dict[int, LayerEstimate] = {}
    if fc_batch > 1:
        # The fully connected layers come from the batched estimate, in order. Only they are
        # paired: the rest of a batch may partition otherwise (an int8 concat runs at batch 1
        # only).
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
        if many:
            layers.append(FrameLayer(one.label, many.engines, many.cycles / fc_batch,
                                     _long_pole(many) / fc_batch, True))
        else:
            layers.append(FrameLayer(one.label, one.engines, float(one.cycles),
                                     float(_long_pole(one)), "CONV" in one.engines))
    return FrameEstimate(model_name, layers, config.clock_hz, fc_batch)


def difference(ours_ms: float, sheet_ms: float) -> float:
    """Our figure against the spreadsheet's, as a fraction (+0.05: 5 % slower)."""
    return ours_ms / sheet_ms - 1.0

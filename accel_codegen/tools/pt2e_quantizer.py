"""A PT2E quantizer whose scheme the accelerator's int8 runs as it is.

torch 2.13 ships neither PT2E's ``prepare_pt2e`` / ``convert_pt2e`` nor any quantizer (they
moved to torchao, ``torchao.quantization.pt2e``; XNNPACK's quantizer to ExecuTorch), so a
user who wants to quantise a PyTorch model with PT2E for this project needs one.
:class:`AccelQuantizer` annotates as backends' quantizers do (XNNPACK's scheme): symmetric
int8 weights (-127..127) per output channel or per tensor, int8 or uint8 activations with a
zero point and their type's whole range; each conv and linear layer (with the ReLU after it)
and each add (with its ReLU) quantises its inputs and output; pools and flatten share their
input's quantisation. The converted model imports through
:func:`accel_codegen.frontend.from_pytorch` with its scales kept (:mod:`accel_codegen.compiler.pt2e`)::

    exported = torch.export.export(model.eval(), example).module()
    prepared = prepare_pt2e(exported, AccelQuantizer())
    for x in calibration:
        prepared(x)
    mod, _ = from_pytorch(convert_pt2e(prepared), example)

Needs torchao (in the test extra: ``torchao==0.18.0``), imported with this module.
"""
from __future__ import annotations

import torch
from torchao.quantization.pt2e.observer import MinMaxObserver, PerChannelMinMaxObserver
from torchao.quantization.pt2e.quantizer import (QuantizationAnnotation, QuantizationSpec,
                                                 Quantizer, SharedQuantizationSpec)

from ..errors import AccelInvalidError

_aten = torch.ops.aten
#: The observers' smallest scale (a constant tensor's).
EPS = 2.0 ** -12
_ACTIVATIONS = {"int8": (torch.int8, -128, 127), "uint8": (torch.uint8, 0, 255)}
_WEIGHTED = (_aten.conv2d.default, _aten.linear.default)
_ADDS = (_aten.add.Tensor,)
_SHARING = (_aten.max_pool2d.default, _aten.adaptive_avg_pool2d.default,
            _aten.avg_pool2d.default, _aten.flatten.using_ints)
_RELUS = (_aten.relu.default, _aten.relu_.default)


class AccelQuantizer(Quantizer):
    """See the module's docstring. ``per_channel``: one weight scale per output channel
    (else one per tensor); ``activations``: ``"int8"`` or ``"uint8"``."""

    def __init__(self, per_channel: bool = True, activations: str = "int8"):
        super().__init__()
        if activations not in _ACTIVATIONS:
            raise AccelInvalidError(f"activations={activations!r}: choose among "
                                    f"{', '.join(_ACTIVATIONS)}")
        dtype, low, high = _ACTIVATIONS[activations]
        self.activation = QuantizationSpec(
            dtype=dtype, quant_min=low, quant_max=high, qscheme=torch.per_tensor_affine,
            observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=EPS))
        if per_channel:
            self.weight = QuantizationSpec(
                dtype=torch.int8, quant_min=-127, quant_max=127, ch_axis=0,
                qscheme=torch.per_channel_symmetric,
                observer_or_fake_quant_ctr=PerChannelMinMaxObserver.with_args(eps=EPS))
        else:
            self.weight = QuantizationSpec(
                dtype=torch.int8, quant_min=-127, quant_max=127,
                qscheme=torch.per_tensor_symmetric,
                observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=EPS))

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        for node in model.graph.nodes:
            if node.op != "call_function" or "quantization_annotation" in node.meta:
                continue
            if node.target in _WEIGHTED:
                self._mark(node, {node.args[0]: self.activation, node.args[1]: self.weight})
            elif node.target in _ADDS:
                self._mark(node, {a: self.activation for a in node.args[:2]
                                  if isinstance(a, torch.fx.Node)})
            elif node.target in _SHARING:
                source = node.args[0]
                node.meta["quantization_annotation"] = QuantizationAnnotation(
                    input_qspec_map={source: self.activation},
                    output_qspec=SharedQuantizationSpec((source, node)), _annotated=True)
        return model

    def _mark(self, node, inputs) -> None:
        """``node`` quantises ``inputs``; its output, or that of the one ReLU reading it,
        is quantised."""
        users = list(node.users)
        last = users[0] if len(users) == 1 and users[0].target in _RELUS else node
        node.meta["quantization_annotation"] = QuantizationAnnotation(
            input_qspec_map=inputs, output_qspec=self.activation if last is node else None,
            _annotated=True)
        if last is not node:
            last.meta["quantization_annotation"] = QuantizationAnnotation(
                output_qspec=self.activation, _annotated=True)

    def validate(self, model: torch.fx.GraphModule) -> None:
        """Nothing to check: every annotation this quantizer makes has an int8 form."""

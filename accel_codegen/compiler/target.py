"""What a build is for: one frozen :class:`Target` in place of the loose keywords (config,
fuse, precision, winograd, layer_precisions and the int8 switches) that the public functions
take. ``Target.of`` is the one place that checks them together; the public functions
(``partition_for_accel``, ``build``) keep their keywords and build a Target from them.

A build's precision is uniform (a :class:`~accel_codegen.sim.config.Precision`) or per layer
(a :class:`LayerPlan`: int8 or fp16 for each layer key, ``f0.3``), which is what the keyword
``precision="mixed"`` asks for; the plan is unassigned until the mixed-precision search fills it.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Dict, Mapping, Optional, Tuple, Union

from ..errors import AccelInvalidError, AccelUnsupportedError
from ..quantization import DEFAULT_METHOD
from ..quantization.gptq import ROUNDINGS
from ..sim.config import AccelConfig, Precision, check_precision

#: The keyword value that asks for a per-layer plan.
MIXED = "mixed"
#: The precisions a layer of a per-layer plan takes.
LAYER_PRECISIONS = (Precision.INT8, Precision.FP16)


@dataclasses.dataclass(frozen=True)
class LayerPlan:
    """Each layer's precision by its key, in the partition's order; ``layers`` None: not
    assigned yet (the mixed-precision search assigns it)."""

    layers: Optional[Tuple[Tuple[str, Precision], ...]] = None

    @classmethod
    def of(cls, layer_precisions: Optional[Mapping[str, str]]) -> "LayerPlan":
        """The plan of a ``layer_precisions`` dict (layer key -> "int8" / "fp16"); None: not
        assigned. Which keys a partition has is checked against it when code is generated."""
        if layer_precisions is None:
            return cls()
        if not isinstance(layer_precisions, Mapping):
            raise AccelInvalidError(f"layer_precisions must be a dict of layer key -> 'int8' "
                                    f"or 'fp16', got {type(layer_precisions).__name__}")
        bad = {k: v for k, v in layer_precisions.items() if v not in LAYER_PRECISIONS}
        if bad:
            raise AccelInvalidError(f"layer_precisions: {bad} (each layer is 'int8' or 'fp16')")
        return cls(tuple((str(k), Precision(v)) for k, v in layer_precisions.items()))

    @property
    def assigned(self) -> bool:
        return self.layers is not None

    def as_dict(self) -> Optional[Dict[str, str]]:
        """Layer key -> precision name (the ``layer_precisions`` form; None: not assigned)."""
        return None if self.layers is None else {k: p.value for k, p in self.layers}


@dataclasses.dataclass(frozen=True)
class Target:
    """A build's hardware and choices.

    ``precision``: uniform, or a :class:`LayerPlan`. ``winograd``: the conv-mode policy (True:
    convolutions the configuration runs in Winograd mode use it where the cost model prefers
    it). The int8 switches (``calibration_method``, ``equalize``, ``bias_correction``,
    ``weight_rounding``) are those of :func:`accel_codegen.partition_for_accel`.
    """

    config: AccelConfig
    fuse: bool = True
    precision: Union[Precision, LayerPlan] = Precision.FP32
    winograd: bool = True
    calibration_method: str = DEFAULT_METHOD
    equalize: Optional[bool] = None
    bias_correction: bool = True
    weight_rounding: str = "nearest"

    @classmethod
    def of(cls, config: AccelConfig | str = "nv_full", *, fuse: bool = True,
           precision: str = "fp32", winograd: bool = True,
           layer_precisions: Optional[Mapping[str, str]] = None,
           calibration_method: str = DEFAULT_METHOD, equalize: Optional[bool] = None,
           bias_correction: bool = True, weight_rounding: str = "nearest",
           generated: bool = True) -> "Target":
        """The Target of the public functions' keywords (``precision="mixed"``: a per-layer
        plan, from ``layer_precisions`` or unassigned), every combination checked: the
        configuration has the precision(s), int8 is fused, the switches fit the precision.
        ``generated`` False: a Target that is estimated, not built (decomposed int8 and
        mixed chains are costed, never generated)."""
        config = AccelConfig.resolve(config)
        if weight_rounding not in ROUNDINGS:
            raise AccelInvalidError(f"weight_rounding = {weight_rounding!r} is not one of "
                                    f"{ROUNDINGS}")
        if precision == MIXED:
            if weight_rounding == "gptq":
                raise AccelInvalidError("weight_rounding='gptq' is a switch of int8 builds; a "
                                        "mixed build rounds its int8 weights to nearest")
            if equalize or not bias_correction:
                raise AccelInvalidError("equalize and bias_correction are switches of int8 "
                                        "builds; a mixed build does not equalise (its fp16 "
                                        "layers would round other weights) and keeps bias "
                                        "correction")
            for each in LAYER_PRECISIONS:
                check_precision(config, each)
            if not fuse and generated:
                raise AccelUnsupportedError("mixed code has int8 layers, which are generated "
                                            "for fused chains (fuse=True)")
            plan: Union[Precision, LayerPlan] = LayerPlan.of(layer_precisions)
        else:
            if layer_precisions is not None:
                raise AccelInvalidError(f"target_sqnr_db and layer_precisions are for "
                                        f"precision='mixed', not {precision!r}")
            check_precision(config, precision)
            plan = Precision.of(precision)
            if plan is Precision.INT8 and not fuse and generated:
                raise AccelUnsupportedError("int8 code is generated for fused chains "
                                            "(fuse=True); decomposed int8 can be estimated, "
                                            "not run")
        return cls(config, fuse, plan, winograd, calibration_method, equalize,
                   bias_correction, weight_rounding)

    def options(self) -> dict:
        """The code generator's options (what RunCodegen hands ``relax.ext.accel``): this
        target's code, as :meth:`from_options` reads them back."""
        options = {"config": self.config.to_json(), "fuse": self.fuse, "precision": self.code,
                   "winograd": self.winograd}
        if self.layer_precisions is not None:
            options["layer_precisions"] = json.dumps(self.layer_precisions)
        return options

    @classmethod
    def from_options(cls, options: Mapping) -> "Target":
        """The Target of the code generator's options (the partition checked the combination
        when it made them)."""
        config = AccelConfig.from_json(str(options["config"]))
        precision = str(options.get("precision", "fp32"))
        if precision == MIXED:
            plan: Union[Precision, LayerPlan] = LayerPlan.of(
                json.loads(str(options["layer_precisions"]))
                if "layer_precisions" in options else None)
        else:
            plan = Precision.of(precision)
        return cls(config, bool(options.get("fuse", True)), plan,
                   bool(options.get("winograd", True)))

    def replace(self, **changes) -> "Target":
        return dataclasses.replace(self, **changes)

    @property
    def mixed(self) -> bool:
        """Whether the precision is per layer."""
        return isinstance(self.precision, LayerPlan)

    @property
    def chains(self) -> Precision:
        """The precision whose chains the partition matches: a per-layer plan's layers run in
        int8 or fp16, so it matches the int8 chains (each runs in either)."""
        return Precision.INT8 if self.mixed else self.precision

    @property
    def code(self) -> str:
        """The precision of the generated code as the code generator's options name it
        ("mixed" for a per-layer plan)."""
        return MIXED if self.mixed else self.precision.value

    @property
    def layer_precisions(self) -> Optional[Dict[str, str]]:
        """A per-layer plan as its dict (None for a uniform precision or a plan not assigned
        yet)."""
        return self.precision.as_dict() if self.mixed else None

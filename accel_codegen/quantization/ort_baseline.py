"""ONNX Runtime as the baseline: what users run today, in fp32 and in static int8.

The benchmark times ONNX Runtime beside the simulator and the accuracy report sets ONNX
Runtime's int8 quantisation beside ours. Both go through this module, so that both use the
same settings:

* **fp32**: an ``InferenceSession`` of the ONNX file as exported (ONNX Runtime's own graph
  optimisations, level ``ORT_ENABLE_ALL``, fold batch norm into the convolutions);
* **int8**: ``onnxruntime.quantization.quantize_static`` in QDQ format with per-channel
  int8 weights, calibrated (MinMax, ONNX Runtime's default) by a ``CalibrationDataReader``
  that hands over the very calibration inputs our int8 build uses. The model is first
  pre-processed with ``quant_pre_process`` (shape inference and graph optimisation: batch
  norm folded into the convolutions), as ONNX Runtime's documentation asks; where that step
  fails on a graph (its symbolic shape inference asserts on some reshapes of computed shapes)
  the model is quantised without it, which the documentation allows, and the recorded
  settings say so (:func:`quantize_int8_as_ort_can`). Activations are
  uint8 by default (U8S8: the operand order of x86's VNNI instructions, ONNX Runtime's fast
  path there; S8S8 measured 2.5x slower on ResNet-18 on this project's machine).

Sessions run sequentially (``ORT_SEQUENTIAL``, one inter-op thread) with
``intra_op_num_threads`` set to the simulator's thread count, their workers not spinning
between runs (see :func:`session`).

onnxruntime is optional (``pip install 'accel-codegen[ort]'``): :func:`unavailable` says
why it cannot be used, and callers skip the comparison with that reason.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
import traceback
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import AccelInvalidError, AccelUnsupportedError

#: The version the extra pins and the figures in docs/ were measured with.
PINNED_VERSION = "1.32.0"
INSTALL_HINT = "pip install 'accel-codegen[ort]' (onnxruntime==1.32.0)"
ACTIVATION_TYPES = ("uint8", "int8")


def unavailable() -> Optional[str]:
    """None when onnxruntime (with its quantisation tools) imports; else why not, in one
    line that says how to install it."""
    try:
        import onnxruntime  # noqa: F401
        import onnxruntime.quantization  # noqa: F401
    except ImportError as error:
        return f"onnxruntime is not installed ({error}): {INSTALL_HINT}"
    return None


def version() -> str:
    import onnxruntime

    return onnxruntime.__version__


@dataclasses.dataclass(frozen=True)
class Int8Settings:
    """How ONNX Runtime's static int8 model is made (recorded in every result)."""

    quant_format: str = "QDQ"
    activation_type: str = "uint8"
    weight_type: str = "int8"
    per_channel: bool = True
    calibrate_method: str = "MinMax"
    pre_process: bool = True
    #: ONNX Runtime's ``reduce_range``: 7-bit weights, which its own documentation advises on
    #: an x86 CPU without VNNI, where its u8 x s8 products are summed in pairs in int16
    #: (``vpmaddubsw``) and saturate; with VNNI (or AVX-512 VNNI) nothing saturates, and the
    #: result depends on which CPU ran it (docs/trained_models.md: the recogniser's int8)
    reduce_range: bool = False

    def __post_init__(self):
        if self.activation_type not in ACTIVATION_TYPES:
            raise AccelInvalidError(f"activation_type = {self.activation_type!r}: choose among "
                                    f"{', '.join(ACTIVATION_TYPES)}")
        # the switches go to ONNX Runtime's quantiser as they are, which reads any truthy
        # value as on (reduce_range="no" would quantise with 7-bit weights): bools only
        for name in ("per_channel", "pre_process", "reduce_range"):
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):
                raise AccelInvalidError(f"{name} = {value!r}: expected True or False")

    def describe(self) -> str:
        weights = f"7-bit {self.weight_type}" if self.reduce_range else self.weight_type
        return (f"static {self.quant_format}, {self.activation_type} activations, per-channel "
                f"{weights} weights, {self.calibrate_method} calibration")


def session(path, threads: int, profile_prefix: Optional[str] = None):
    """An ONNX Runtime CPU session: ``threads`` intra-op threads, sequential execution. With
    ``profile_prefix``, ONNX Runtime's profiler records every node's time into a JSON file of
    that prefix (``end_profiling()`` returns its path)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(profile_prefix)
    options.intra_op_num_threads = int(threads)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: no warnings on stderr per session
    # Each session has its own pool, whose workers spin after a run by default: two sessions
    # (fp32, int8) interleaved then steal each other's cores (ResNet-18, 2 threads: int8
    # 18 ms interleaved against 6 ms alone); without spinning, 6.7 ms, and alone unchanged.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _graph_inputs(path) -> List[str]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    return [v.name for v in model.graph.input if v.name not in initializers]


def feeds(names: Sequence[str], example: Sequence[np.ndarray]) -> Dict[str, np.ndarray]:
    """An example input tuple as ONNX Runtime's feed dictionary (inputs in graph order)."""
    if len(names) != len(example):
        raise AccelInvalidError(f"the ONNX graph has {len(names)} inputs ({', '.join(names)}), "
                                f"the example {len(example)}")
    return {n: np.ascontiguousarray(x) for n, x in zip(names, example)}


def run(sess, example: Sequence[np.ndarray]) -> np.ndarray:
    """The first output of one inference, as float64 (as the accuracy report compares)."""
    names = [i.name for i in sess.get_inputs()]
    return np.asarray(sess.run(None, feeds(names, example))[0], np.float64)


def quantize_int8(path, calibration: Sequence[Sequence[np.ndarray]], out_dir,
                  settings: Int8Settings = Int8Settings()) -> Path:
    """ONNX Runtime's static int8 quantisation of an ONNX file, calibrated on ``calibration``
    (example input tuples, the ones our int8 build calibrates on). Returns the QDQ model's
    path (in ``out_dir``)."""
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod,
                                          QuantFormat, QuantType, quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    examples = [tuple(e) if isinstance(e, (tuple, list)) else (e,) for e in calibration]
    if not examples:
        raise AccelInvalidError("ONNX Runtime's int8 quantisation needs calibration inputs")
    path, out_dir = Path(path), Path(out_dir)
    source = path
    if settings.pre_process:
        source = out_dir / f"{path.stem}.pre.onnx"
        try:
            quant_pre_process(str(path), str(source))
        except Exception as error:  # pylint: disable=broad-except  (ONNX Runtime's, typed)
            raise PreProcessError(f"ONNX Runtime's quant_pre_process failed on {path.name}: "
                                  f"{_ort_error(error)}") from error
    names = _graph_inputs(source)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.pending = iter(examples)

        def get_next(self):
            example = next(self.pending, None)
            return None if example is None else feeds(names, example)

        def rewind(self):
            self.pending = iter(examples)

    types = {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8}
    out = out_dir / f"{path.stem}.int8.onnx"
    try:
        quantize_static(str(source), str(out), Reader(),
                        quant_format=QuantFormat[settings.quant_format],
                        activation_type=types[settings.activation_type],
                        weight_type=types[settings.weight_type],
                        per_channel=settings.per_channel,
                        calibrate_method=CalibrationMethod[settings.calibrate_method],
                        reduce_range=settings.reduce_range)
    except AccelInvalidError:
        raise  # our feeds' own check
    except Exception as error:  # pylint: disable=broad-except  (ONNX Runtime's, typed)
        raise AccelUnsupportedError(f"ONNX Runtime's quantize_static failed on {path.name}: "
                                    f"{_ort_error(error)}") from error
    return out


class PreProcessError(AccelUnsupportedError):
    """ONNX Runtime's ``quant_pre_process`` failed on the graph (an optional step)."""


def _ort_error(error: Exception) -> str:
    """An ONNX Runtime exception in one line: its type, first line and, for a bare assert
    (the message is empty), the function that asserted."""
    text = (str(error).strip().splitlines() or [""])[0][:200]
    frames = traceback.extract_tb(error.__traceback__)
    where = f" in {frames[-1].name}" if frames else ""
    return f"{type(error).__name__}{where}{': ' + text if text else ''}"


def quantize_int8_as_ort_can(path, calibration: Sequence[Sequence[np.ndarray]], out_dir,
                             settings: Int8Settings = Int8Settings()
                             ) -> Tuple[Path, Int8Settings]:
    """:func:`quantize_int8`, and where its pre-processing fails on the graph, the same without
    it (ONNX Runtime's documentation makes that step optional): the QDQ model's path and the
    settings it was made with, which a result records. Other failures raise
    AccelUnsupportedError with ONNX Runtime's error."""
    try:
        return quantize_int8(path, calibration, out_dir, settings), settings
    except PreProcessError:
        fallback = dataclasses.replace(settings, pre_process=False)
        return quantize_int8(path, calibration, out_dir, fallback), fallback


def qdq_summary(path) -> Dict[str, int]:
    """What makes a QDQ model quantised: its QuantizeLinear / DequantizeLinear nodes and its
    8-bit initializers (the weights)."""
    import onnx

    model = onnx.load(str(path))
    ops = Counter(n.op_type for n in model.graph.node)
    eight_bit = {onnx.TensorProto.INT8, onnx.TensorProto.UINT8}
    return {"quantize_linear": ops["QuantizeLinear"], "dequantize_linear": ops["DequantizeLinear"],
            "int8_initializers": sum(1 for i in model.graph.initializer
                                     if i.data_type in eight_bit and len(i.dims) >= 2),
            "nodes": sum(ops.values())}

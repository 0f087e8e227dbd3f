"""accel-codegen: a BYOC external code generator for Apache TVM targeting a simulated
NVDLA-like accelerator, and the simulator itself."""
from .config import AccelConfig
from .errors import (AccelBufferError, AccelError, AccelInvalidError, AccelMemoryError,
                     AccelNotFoundError, AccelShapeError, AccelUnsupportedError)
from .ops import Conv, Pool, Sdp
from .sim import Device, OpStats, RunStats, estimate_chain

__version__ = "0.1.0"

__all__ = [
    "AccelConfig", "AccelError", "AccelInvalidError", "AccelShapeError",
    "AccelUnsupportedError", "AccelBufferError", "AccelMemoryError", "AccelNotFoundError",
    "Conv", "Sdp", "Pool", "Device", "OpStats", "RunStats", "estimate_chain",
]

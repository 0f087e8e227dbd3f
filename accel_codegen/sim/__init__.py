"""The simulator's Python face: configurations, the op vocabulary, engine op descriptors
(Conv, Sdp, Pool, Lrn, Bdma, Rubik), devices and runs, the process-wide profile, and the NumPy reference
of every engine op.

This layer never imports TVM: ``import accel_codegen.sim`` works where TVM is absent.
"""
from .config import AccelConfig
from .device import Device, OpStats, RunStats, estimate_chain, profile_enable, profile_records
from .ops import Bdma, CdpInt8, Conv, Lrn, Pool, Rubik, Sdp

__all__ = ["AccelConfig", "Bdma", "CdpInt8", "Conv", "Device", "Lrn", "OpStats", "Pool", "Rubik", "RunStats",
           "Sdp", "estimate_chain", "profile_enable", "profile_records"]

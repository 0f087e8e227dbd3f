"""The compiler (TVM BYOC): import a model (:mod:`.frontend`, :mod:`.custom` primitives), read
matched Relax ops as accelerator layers (:mod:`.layer`, :mod:`.lowering`), mark them with the
pattern table (:mod:`.patterns`), partition, generate C and build.

Importing this package imports TVM (seconds); the simulator (:mod:`accel_codegen.sim`) does not.
"""

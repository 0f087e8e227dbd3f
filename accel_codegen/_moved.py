"""Old import paths of modules that moved into subpackages keep working: ``import
accel_codegen.ops`` gives :mod:`accel_codegen.sim.ops` itself (one module object, not a copy).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

#: Old module name (under accel_codegen) -> where it lives now.
MOVED = {
    "config": "sim.config",
    "ops": "sim.ops",
    "reference": "sim.reference",
    "vocabulary": "sim.vocabulary",
    "frontend": "compiler.frontend",
    "custom": "compiler.custom",
    "lowering": "compiler.lowering",
    "patterns": "compiler.patterns",
    "codegen": "compiler.codegen",
    "partition": "compiler.partition",
    "toolchain": "compiler.toolchain",
    "cli": "tools.cli",
    "profiling": "sim.profiling",
    "costs": "sim.costs",
    "accuracy": "flows.accuracy",
    "models": "tools.models",
    "model_spec": "tools.model_spec",
    "config_files": "tools.config_files",
    "estimation": "tools.estimation",
    "bench": "tools.bench",
    "plotting": "tools.plotting",
    "progress": "tools.progress",
    # the flows above the compiler (issue 28), once in quantization/
    "quantization.accuracy": "flows.accuracy",
    "quantization.mixed": "flows.mixed",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name and loads it by importing the new module in its place."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.partition(".")
        if package == __package__ and name in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return None  # a placeholder; exec_module puts the real module in its place

    def exec_module(self, module):
        name = module.__name__.partition(".")[2]
        sys.modules[module.__name__] = importlib.import_module(f"{__package__}.{MOVED[name]}")


def install() -> None:
    """Put the finder on sys.meta_path (once)."""
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.append(_Alias())

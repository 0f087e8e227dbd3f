"""The virtual machine users run: one ``relax.VirtualMachine`` per thread (TVM's is not
thread-safe), arguments checked and TVM's argument errors rewritten as typed errors naming the
argument, what was expected and what was received."""
from __future__ import annotations

import os
import re
import reprlib
import tempfile
import threading
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import tvm
from tvm import relax

from ..errors import (AccelError, AccelInvalidError, AccelLibraryError, AccelNotFoundError,
                      AccelShapeError, register_with_tvm_ffi)
from .library import compiler_message, load_library
from .packed_imports import write_library

_ERROR_CONTEXT = re.compile(r"ErrorContext\(fn=(?P<fn>[^,]*), loc=param\[(?P<index>\d+)\]"
                            r"(?P<path>[^,]*), param=(?P<param>[^,]*), "
                            r"annotation=(?P<annotation>.*)\)\s+(?P<detail>[^\n]*)")


_TENSOR_ANNOTATION = re.compile(r'R\.Tensor\(\((?P<shape>[^()]*)\),\s*dtype="(?P<dtype>\w+)"\)')


def _describe(value) -> str:
    """What an argument is, for an error message: a tensor's shape and dtype."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        try:
            return f"a tensor of shape {tuple(int(d) for d in shape)} and dtype {dtype}"
        except (TypeError, ValueError):
            pass
    return f"{reprlib.repr(value)} ({type(value).__name__})"


class AccelFunction:
    """A function of an :class:`AccelVirtualMachine`: each call runs on the calling thread's
    own VM, with the arguments checked (count) and TVM's argument errors translated into
    :class:`AccelShapeError` / :class:`AccelInvalidError` naming the argument, what was
    expected and what was received."""

    def __init__(self, machine: "AccelVirtualMachine", name: str):
        self._machine = machine
        self.name = name

    def __repr__(self) -> str:
        return f"<accel_codegen function {self.name!r} of {self._machine.source}>"

    def __call__(self, *args):
        machine = self._machine
        function = machine._function(self.name)
        arity = machine._arity(self.name)
        if arity is not None and len(args) != arity:
            params = ", ".join(machine._param_names(self.name))
            raise AccelInvalidError(
                f"{self.name}: takes {arity} argument{'s' if arity != 1 else ''} ({params}), "
                f"got {len(args)}")
        try:
            return function(*args)
        except AccelError:
            raise
        except Exception as error:  # pylint: disable=broad-except
            typed = _argument_error(self.name, error, args)
            if typed is None:
                raise
            raise typed from None


def _argument_error(function: str, error: Exception, args) -> Optional[AccelError]:
    """TVM's check of a VM argument -> a typed error naming it (None: not such a check)."""
    match = _ERROR_CONTEXT.search(str(error))
    if match is None:
        return None
    index, part, detail = int(match["index"]), match["path"].strip(), match["detail"].strip()
    reason = re.sub(r"\s+", " ", detail).strip(" .")
    if match["fn"] == function and not part and index < len(args):
        got = f"{_describe(args[index])} ({reason})"
    else:
        got = reason
    # a value of another kind or dtype is invalid; a tensor of another rank or size, a shape
    kind = AccelInvalidError if ("dtype" in detail or "expect a " in detail) else AccelShapeError
    return kind(f"{match['fn']}: argument {index} ({match['param']}{part}) must be "
                f"{match['annotation']}, got {got}")


class AccelVirtualMachine:
    """A Relax VM that several threads may call at once.

    TVM's ``relax.VirtualMachine`` is not thread-safe (its registers are per VM): this object
    keeps one VM per calling thread, all on the same loaded module and device, created on a
    thread's first use. ``vm["main"]`` returns a function that runs on the calling thread's
    VM, so it too may be shared; every other attribute (``time_evaluator``, ``set_input``,
    ``invoke_stateful``, ...) is the calling thread's VM's. The generated code serialises the
    accelerator's runs itself (one simulated accelerator: calls queue).
    """

    def __init__(self, library, device, source: str = "module"):
        self.library = library  # the loaded runtime module every thread's VM runs
        self.device = device
        self.source = source
        self._local = threading.local()
        self._lock = threading.Lock()
        self._arities: Dict[str, Optional[int]] = {}
        self._names: Dict[str, List[str]] = {}
        self.vm  # the first VM now: a library that cannot start fails here, typed

    @property
    def vm(self) -> relax.VirtualMachine:
        """The calling thread's own ``relax.VirtualMachine``."""
        local = self._local
        vm = getattr(local, "vm", None)
        if vm is None:
            with self._lock:  # TVM's lazy initialisation of a module is not thread-safe
                try:
                    vm = relax.VirtualMachine(self.library, self.device)
                except AttributeError as error:  # not AttributeError: see __getattr__
                    raise AccelLibraryError(f"{self.source} is not a Relax VM executable: "
                                            f"{error}") from None
            local.vm, local.functions = vm, {}
        return vm

    def _function(self, name: str):
        vm = self.vm
        functions = self._local.functions
        function = functions.get(name)
        if function is None:
            try:
                function = vm[name]
            except AttributeError:
                raise AccelNotFoundError(f"{self.source} has no function {name!r}") from None
            functions[name] = function
        return function

    def _arity(self, name: str) -> Optional[int]:
        if name not in self._arities:
            try:
                self._arities[name] = int(self.vm._get_function_arity(name))
            except Exception:  # pylint: disable=broad-except  (not a VM function)
                self._arities[name] = None
        return self._arities[name]

    def _param_names(self, name: str) -> List[str]:
        if name not in self._names:
            arity = self._arity(name) or 0
            self._names[name] = [str(self.vm._get_function_param_name(name, i))
                                 for i in range(arity)]
        return self._names[name]

    def input_specs(self, name: str = "main") -> List[Tuple[str, Tuple[int, ...], str]]:
        """(parameter name, shape, dtype) of each parameter of ``name``, as the library checks
        its arguments.

        The executable keeps the annotations only in its argument checks, so each parameter
        is probed: a call with the parameters before it well formed (zeros) and a 0-d array for
        it, which the prologue refuses, naming the annotation, before any of the function's
        code runs.

        Raises
        ------
        AccelInvalidError
            A parameter that is not a tensor of a static shape (a symbolic dimension: its
            shape depends on the caller, so the caller must give the array).
        """
        import numpy as np

        specs: List[Tuple[str, Tuple[int, ...], str]] = []
        names = self._param_names(name)
        function = self._function(name)
        for index, param in enumerate(names):
            probe = [tvm.runtime.tensor(np.zeros(shape, dtype)) for _, shape, dtype in specs]
            probe += [tvm.runtime.tensor(np.zeros((), np.float32))] * (len(names) - index)
            try:
                function(*probe)
            except Exception as error:  # pylint: disable=broad-except  (TVM's check)
                match = _ERROR_CONTEXT.search(str(error))
            else:
                match = None
            annotation = match["annotation"].strip() if match and \
                int(match["index"]) == index and not match["path"].strip() else None
            tensor = _TENSOR_ANNOTATION.fullmatch(annotation or "")
            if tensor is None or not re.fullmatch(r"\s*\d+(\s*,\s*\d+)*\s*,?\s*|\s*",
                                                  tensor["shape"]):
                raise AccelInvalidError(
                    f"{name}: parameter {index} ({param}) is "
                    f"{annotation or 'not a tensor the library checks'}, not a tensor of a "
                    "static shape: give its array")
            shape = tuple(int(d) for d in tensor["shape"].replace(" ", "").split(",") if d)
            specs.append((param, shape, tensor["dtype"]))
        return specs

    def __getitem__(self, name: str) -> AccelFunction:
        self._function(name)  # an unknown name fails here, as relax's VM does
        return AccelFunction(self, name)

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("vm", "_local", "_lock", "library", "device",
                                             "source", "_arities", "_names"):
            raise AttributeError(name)
        return getattr(self.vm, name)

    def __repr__(self) -> str:
        return f"<accel_codegen.AccelVirtualMachine of {self.source} on {self.device}>"


def jit_with_simulator(exe) -> "tvm.runtime.Module":
    """``exe.jit()`` with the simulator linked in, and the library loaded so that it is unloaded
    (its constants, packed weights and scratch freed) when the executable and every VM on it
    are dropped: ``Executable.jit`` loads with ``tvm.runtime.load_module``, which keeps every
    library to the end of the process (:func:`.library.load_library`). The module is kept
    where ``Executable.jit`` keeps its own, so a second VM (or ``exe.jit()``) reuses it."""
    module = getattr(exe, "_jitted_mod", None)
    if module is not None:
        return module
    if not exe.mod._collect_from_import_tree(lambda m: m.kind in ("c", "static_library")):
        # nothing to compile (as Executable.jit decides): runs as it is (TVM's own jit, not
        # an AccelExecutable's, which comes here)
        return tvm.runtime.Executable.jit(exe)
    with tempfile.TemporaryDirectory(prefix="accel-jit-") as directory:
        path = Path(directory) / "exported.so"
        try:
            write_library(exe.mod, path)
        except AccelLibraryError:
            raise
        except Exception as error:  # TVM's RuntimeError with the whole command line
            raise AccelLibraryError(f"cannot build the executable's library: "
                                    f"{compiler_message(error)}") from None
        module = load_library(path)  # mapped: the file may go
    exe._jitted_mod = module
    return module


def virtual_machine(exe_or_path, device=None) -> AccelVirtualMachine:
    """A VM for an executable (JIT-linked against the simulator), an exported library's path,
    or a loaded module.

    The result is used as a ``relax.VirtualMachine`` (``vm["main"](*inputs)``) and is safe to
    call from several threads at once (:class:`AccelVirtualMachine`). A library path is
    checked before it is loaded (:func:`check_library`): a damaged or foreign file raises
    :class:`AccelLibraryError` naming it, and never reaches the dynamic loader.
    """
    register_with_tvm_ffi()  # errors raised by the generated code arrive typed
    device = device if device is not None else tvm.cpu()
    if isinstance(exe_or_path, (str, os.PathLike)):
        module = load_library(exe_or_path)
        source = f"library '{exe_or_path}'"
    elif hasattr(exe_or_path, "jit"):
        module, source = jit_with_simulator(exe_or_path), "the executable"
    elif isinstance(exe_or_path, tvm.runtime.Module):
        module, source = exe_or_path, "the module"
    else:
        raise AccelInvalidError(f"virtual_machine takes an executable, a library path or a "
                                f"loaded module, got {type(exe_or_path).__name__}")
    try:
        return AccelVirtualMachine(module, device, source)
    except AccelError:
        raise
    except Exception as error:  # pylint: disable=broad-except  (not a Relax VM executable)
        lines = [line for line in str(error).strip().splitlines() if line.strip()]
        raise AccelLibraryError(f"{source} cannot start a virtual machine: "
                                f"{lines[0] if lines else type(error).__name__}") from None



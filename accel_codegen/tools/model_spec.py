"""MODEL: how a model is named on the command line and in the tools, parsed in one place.

A MODEL is one of

* a zoo model name (``resnet18``; see :mod:`accel_codegen.models`);
* an ONNX file (``path/to/model.onnx``);
* ``path/to/file.py:function``, a function of no arguments returning
  ``(torch_module, example_inputs_tuple)``.

:func:`parse_model_spec` checks the text (files exist, the zoo knows the name, the function
part is a name) without importing TVM, so that a command line fails at once on a typo;
:func:`load_model` turns a MODEL (or a torch module or a Relax module with its inputs) into a
:class:`LoadedModel` ready for every tool. Both raise :class:`~accel_codegen.AccelInvalidError`
with a message that names what is wrong.

>>> spec = parse_model_spec("my_net.py:build")
>>> spec.kind, spec.path, spec.function
('python', 'my_net.py', 'build')
>>> model = load_model("lenet5")
"""
from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from ..errors import AccelInvalidError

ZOO, ONNX, PYTHON = "zoo", "onnx", "python"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A parsed MODEL: its ``kind`` ("zoo", "onnx" or "python"), the text as given, and the
    file and function it names (``path`` for onnx and python, ``function`` for python)."""

    kind: str
    text: str
    path: Optional[str] = None
    function: Optional[str] = None

    @property
    def name(self) -> str:
        """The model's name in reports: the zoo name, the ONNX file's stem, the function."""
        if self.kind == ONNX:
            return Path(self.path).stem
        return self.function if self.kind == PYTHON else self.text


def zoo_names() -> List[str]:
    """The zoo's model names, sorted (imports torch, not TVM)."""
    from .models import MODELS

    return sorted(MODELS)


def parse_model_spec(text: str) -> ModelSpec:
    """Check a MODEL and say which kind it is (no TVM import; torch for a zoo name).

    Raises
    ------
    AccelInvalidError
        A file that does not exist, ``file.py`` without ``:function``, a function part that is
        not a name, or a name the zoo does not know.
    """
    if not isinstance(text, str):
        raise AccelInvalidError(f"a MODEL is a str, got {type(text).__name__}")
    if text.endswith(".onnx"):
        if not Path(text).is_file():
            raise AccelInvalidError(f"ONNX file '{text}' does not exist")
        if Path(text).stat().st_size == 0:
            raise AccelInvalidError(f"ONNX file '{text}' is empty (0 bytes)")
        return ModelSpec(ONNX, text, path=text)
    head, colon, function = text.rpartition(":")
    if colon and head.endswith(".py"):
        if not Path(head).is_file():
            raise AccelInvalidError(f"model file '{head}' does not exist")
        if not function.isidentifier():
            raise AccelInvalidError(f"{text!r}: the part after ':' must be a function name")
        return ModelSpec(PYTHON, text, path=head, function=function)
    if text.endswith(".py"):
        raise AccelInvalidError(f"{text!r}: name the function too, as file.py:function")
    names = zoo_names()
    if text not in names:
        raise AccelInvalidError(f"unknown model {text!r}: give a zoo model ({', '.join(names)}), "
                                "an .onnx file, or file.py:function")
    return ModelSpec(ZOO, text)


# --- loading ----------------------------------------------------------------------------------

@dataclasses.dataclass
class LoadedModel:
    """A model ready for every mode: the Relax module, its inputs, and the torch original."""

    name: str
    mod: Any                      # tvm.IRModule
    params: Dict[str, np.ndarray]
    inputs: List[np.ndarray]
    torch_model: Any = None       # torch.nn.Module, when the model came from PyTorch
    torch_inputs: Optional[tuple] = None


class _ZooModel(LoadedModel):
    """A zoo model whose import was read from the import cache (:mod:`.import_cache`): its
    torch module, which only the PyTorch and ONNX Runtime modes read, is built when first
    read (``get_model``: the weights and inputs the import was made from)."""

    def _built(self) -> tuple:
        if self.__dict__.get("_torch") is None:
            from .models import get_model

            self.__dict__["_torch"] = get_model(self.name)
        return self.__dict__["_torch"]

    def _only_none(self, value) -> None:  # the dataclass's __init__ sets the fields to None
        if value is not None:
            raise AttributeError(f"{self.name}: a cached zoo model's torch module is the zoo's")

    torch_model = property(lambda self: self._built()[0], _only_none)
    torch_inputs = property(lambda self: self._built()[1], _only_none)


def _from_torch(name: str, model, inputs) -> LoadedModel:
    from ..compiler import frontend

    if not isinstance(inputs, tuple):
        inputs = (inputs,)
    try:
        arrays = [np.ascontiguousarray(t.detach().numpy()) for t in inputs]
    except AttributeError:
        raise AccelInvalidError(f"{name}: the example inputs must be torch tensors") from None
    mod, params = frontend.from_pytorch(model, inputs)
    return LoadedModel(name, mod, params, arrays, model, inputs)


def _static_onnx(path: Path):
    """An ONNX file's model with every unknown input dimension (a dynamic batch, as
    scikit-learn's and many PyTorch exports declare) fixed to 1, the shapes
    :func:`_onnx_inputs` reads: with a symbolic dimension every operator would stay on the
    host (``[runtime-shape]``)."""
    from ..compiler.frontend import load_onnx

    model = load_onnx(path)
    initializers = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        for dim in value.type.tensor_type.shape.dim:
            if not dim.HasField("dim_value"):
                dim.dim_value = 1
    return model


def _onnx_inputs(model) -> List[np.ndarray]:
    """Random N(0, 1) arrays (seed 0) of the inputs of :func:`_static_onnx`'s model."""
    import onnx

    initializers = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(0)
    arrays = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        t = value.type.tensor_type
        dims = [d.dim_value for d in t.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        arrays.append(rng.standard_normal(dims).astype(dtype))
    return arrays


def load_callable(spec: str) -> Callable[[], Any]:
    """``path/to/file.py:function`` -> the function (the file is imported as a module)."""
    path_text, _, function = spec.rpartition(":")
    path = Path(path_text)
    if not path.is_file():
        raise AccelInvalidError(f"model file '{path}' does not exist")
    # As `python file.py` runs it: the file's folder first on the import path, so that the
    # file (and the function, when it runs) imports the files beside it.
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    module_spec = importlib.util.spec_from_file_location(f"_accel_user_{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as error:  # the user's file: say which and why, keep the cause
        raise AccelInvalidError(f"importing '{path}' failed: {type(error).__name__}: "
                                f"{error}") from error
    fn = getattr(module, function, None)
    if not callable(fn):
        raise AccelInvalidError(f"'{path}' has no function {function!r}")
    return fn


def _load_object(model: Any, inputs: Optional[Sequence]) -> LoadedModel:
    """A Relax module or a torch module given as an object, with its example inputs."""
    import tvm

    if isinstance(model, tvm.IRModule):
        if inputs is None:
            raise AccelInvalidError("a Relax module needs its example inputs")
        return LoadedModel("module", model, {}, [np.ascontiguousarray(a) for a in inputs])
    if inputs is None:
        raise AccelInvalidError(f"a {type(model).__name__} needs its example inputs")
    return _from_torch(type(model).__name__, model, tuple(inputs))


def load_model(spec: Any, inputs: Optional[Sequence] = None) -> LoadedModel:
    """A model for the benchmark and the command-line tool.

    Parameters
    ----------
    spec : str or ModelSpec or torch.nn.Module or tvm.IRModule or LoadedModel
        A MODEL (a zoo model name, an ``.onnx`` path, ``file.py:function``: the function
        returns ``(torch_module, example_inputs_tuple)``), a parsed one, a torch module (with
        ``inputs``), or a Relax module (with ``inputs`` as NumPy arrays; no PyTorch mode then).
    inputs : sequence, optional
        The example inputs for a module given as an object.
    """
    if isinstance(spec, LoadedModel):
        return spec
    if isinstance(spec, str):
        spec = parse_model_spec(spec)
    if not isinstance(spec, ModelSpec):
        return _load_object(spec, inputs)
    if spec.kind == ONNX:
        from ..compiler import frontend

        model = _static_onnx(Path(spec.path))
        arrays = _onnx_inputs(model)  # before the import, which may rewrite the graph
        mod, params = frontend.from_onnx(model)
        return LoadedModel(spec.name, mod, params, arrays)
    if spec.kind == PYTHON:
        result = load_callable(spec.text)()
        if not (isinstance(result, tuple) and len(result) == 2):
            raise AccelInvalidError(f"{spec.text} must return (torch_module, "
                                    f"example_inputs_tuple), got {type(result).__name__}")
        return _from_torch(spec.name, *result)
    from .import_cache import zoo_import

    mod, arrays, built = zoo_import(spec.name)
    if built is not None:
        return LoadedModel(spec.name, mod, {}, arrays, *built)
    return _ZooModel(spec.name, mod, {}, arrays)


def random_inputs(model, count: int, seed: int) -> List[tuple]:
    """``count`` example input tuples of N(0, 1) values shaped and typed as ``model``'s inputs
    (a :class:`LoadedModel`, or a sequence of example arrays), drawn with ``seed``."""
    examples = [np.asarray(a) for a in getattr(model, "inputs", model)]
    rng = np.random.default_rng(seed)
    return [tuple(rng.standard_normal(a.shape).astype(a.dtype) for a in examples)
            for _ in range(count)]

"""A zoo model's import kept on disk, so that the next process reads it instead of making it.

Building a zoo model (its weights drawn, its batch-norm statistics measured in float64) and
importing it (``torch.export``, TVM's importer, the source names) costs every command-line
process seconds of CPU before its own work starts, more than reading the result back
(docs/measurements.md, "The zoo's import cache"). The result depends only on the model's
name, batch and seed, and on the code and libraries that made it, so :func:`zoo_import`
writes it to a file once and every later process with the same key reads it back.

What a file holds: the Relax module as TVMScript with its constants lifted into extra
parameters of ``main`` (TVM's JSON serializer cannot write a Relax module here), the constants
and the example inputs as arrays, each call's source name by binding position (TVMScript has no
field for it), and the module's attributes. A file is written only after it has been read
back and found equal to the module it was made from (``tvm.ir.assert_structural_equal``, the
constants' values included, and every source name), so a module that does not survive the
round trip is never cached; under ``ACCEL_CODEGEN_STRICT=1`` (the test suite) that is an error.

**The key** is everything that determines the import: the model, batch and seed; the file
format; the package's version and the text of every one of its Python files (the zoo, the
frontend, the rewrites it runs); the versions of torch, TVM, NumPy and Python. The file
stores its key and is read only when the stored key equals the current one, so a stale file is
never read (a changed file of the package is a new key, not a wrong answer). A process that
has registered custom primitives (:mod:`accel_codegen.custom`) converts with them and
bypasses the cache, as does a model added to ``MODELS`` at run time (its code is not in the
key).

**Where**: ``$ACCEL_CODEGEN_CACHE`` (a directory; ``0``, ``off`` or an empty value turn the
cache off), else ``$XDG_CACHE_HOME/accel-codegen``, else ``~/.cache/accel-codegen``. Files
are written to a temporary name in that directory and renamed into place
(``os.replace``, atomic), so a reader sees a whole file or none, and two processes writing the
same entry at once both succeed (the last rename wins; both wrote the same thing). A file
that cannot be read is made again; a directory that cannot be written leaves the cache
unused, silently. Writing a model's entry deletes that model's entries of other keys, so the
cache holds one file per zoo model (ResNet-50's is ~100 MB): the zoo's size at most.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

#: The environment variable naming the cache's directory (or turning it off).
CACHE_ENV = "ACCEL_CODEGEN_CACHE"
#: Values of :data:`CACHE_ENV` that turn the cache off.
OFF = ("", "0", "off", "no", "false")
#: Bumped when what a file holds changes.
FORMAT = 1

_PREFIX = "accel_c"  # the lifted constants' parameter names: accel_c0, accel_c1, ...


def cache_dir() -> Optional[Path]:
    """The cache's directory, or None when :data:`CACHE_ENV` turns it off."""
    value = os.environ.get(CACHE_ENV)
    if value is not None:
        return None if value.strip().lower() in OFF else Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "accel-codegen"


#: The package's folder, whose Python files :func:`sources_digest` reads.
PACKAGE = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=None)
def sources_digest(package: Path = PACKAGE) -> str:
    """SHA-256 of every Python file of ``package`` (paths and bytes, in path order)."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def key(name: str, batch: int = 1, seed: int = 0) -> Dict[str, Any]:
    """What determines a zoo model's import (see the module's docstring)."""
    import torch
    import tvm

    from .. import __version__

    return {"format": FORMAT, "model": name, "batch": batch, "seed": seed,
            "accel_codegen": __version__, "sources": sources_digest(),
            "torch": torch.__version__, "tvm": tvm.__version__, "numpy": np.__version__,
            "python": sys.version.split()[0]}


def entry_path(directory: Path, model_key: Dict[str, Any]) -> Path:
    """The file of ``model_key`` in ``directory``: the model's name and the key's digest."""
    text = json.dumps(model_key, sort_keys=True)
    return directory / f"{model_key['model']}-{hashlib.sha256(text.encode()).hexdigest()[:32]}.npz"


# --- a module as a file's fields ---------------------------------------------------------------

def _lifted(mod) -> Tuple[Any, List[np.ndarray]]:
    """``main`` with every constant replaced by a new trailing parameter, and their values."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Lift(relax.PyExprMutator):
        def __init__(self):
            super().__init__()
            self.params, self.values = [], []

        def visit_generic_const_(self, const):
            var = relax.Var(f"{_PREFIX}{len(self.params)}", const.ty)
            self.params.append(var)
            self.values.append(const.value.numpy())
            return var

    main = mod["main"]
    lift = Lift()
    body = lift.visit_expr(main.body)
    function = relax.Function(list(main.params) + lift.params, body, main.ret_ty, main.is_pure,
                              main.attrs)
    return function, lift.values


def _fields(mod) -> Dict[str, Any]:
    """A module with ``main`` alone as a file's fields (see the module's docstring)."""
    from ..compiler import source_names

    if [gv.name_hint for gv in mod.get_global_vars()] != ["main"]:
        raise ValueError("only a module of main alone is cached")
    function, values = _lifted(mod)
    attrs = {str(k): str(v) for k, v in mod.attrs.items()} if mod.attrs else {}
    fields = {"script": np.array(function.script()),
              "names": np.array(json.dumps(source_names.binding_names(mod["main"]))),
              "attrs": np.array(json.dumps(attrs))}
    fields.update({f"constant_{i}": value for i, value in enumerate(values)})
    return fields


def _module(fields) -> Any:
    """The module of :func:`_fields`' fields."""
    import tvm

    from ..compiler import source_names

    function = tvm.script.from_source(str(fields["script"]))
    count = sum(1 for name in fields if name.startswith("constant_"))
    function = function.bind_params({f"{_PREFIX}{i}": tvm.runtime.tensor(fields[f"constant_{i}"])
                                     for i in range(count)})
    function = source_names.with_binding_names(function, json.loads(str(fields["names"])))
    mod = tvm.IRModule({"main": function})
    for name, value in json.loads(str(fields["attrs"])).items():
        mod = mod.with_attr(name, value)
    return mod


def _same(mod, other) -> bool:
    """Whether ``other`` is ``mod``: structurally (constants' values too) and in every call's
    source name."""
    import tvm

    from ..compiler import source_names

    try:
        tvm.ir.assert_structural_equal(mod, other)
    except ValueError:
        return False
    return source_names.binding_names(mod["main"]) == source_names.binding_names(other["main"])


# --- reading and writing ------------------------------------------------------------------------

def read(path: Path, model_key: Dict[str, Any]) -> Optional[Tuple[Any, List[np.ndarray]]]:
    """(module, example inputs) from ``path`` if it holds ``model_key``'s import; None if it
    does not exist, holds another key or cannot be read."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            fields = {name: stored[name] for name in stored.files}
        if str(fields.pop("key")) != json.dumps(model_key, sort_keys=True):
            return None
        count = sum(1 for name in fields if name.startswith("input_"))
        inputs = [fields.pop(f"input_{i}") for i in range(count)]
        return _module(fields), inputs
    except Exception:  # pylint: disable=broad-except  # missing, truncated, unparsable: a miss
        return None


def write(path: Path, model_key: Dict[str, Any], mod, inputs) -> bool:
    """Write ``mod`` and its example ``inputs`` as ``model_key``'s entry, atomically; False
    (nothing written) when the directory cannot be written. Raises ValueError when the module
    does not read back as itself (never written then)."""
    fields = _fields(mod)
    if not _same(mod, _module(fields)):
        raise ValueError(f"{model_key['model']}'s module does not read back from TVMScript as "
                         "itself")
    fields["key"] = np.array(json.dumps(model_key, sort_keys=True))
    fields.update({f"input_{i}": np.ascontiguousarray(x) for i, x in enumerate(inputs)})
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".npz")
    except OSError:
        return False
    try:
        with os.fdopen(handle, "wb") as file:
            np.savez(file, **fields)
        os.replace(temporary, path)
    except OSError:
        return False
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    for other in path.parent.glob(f"{model_key['model']}-*.npz"):  # the model's older keys
        if other != path:
            try:
                other.unlink()
            except OSError:
                pass
    return True


def zoo_import(name: str, batch: int = 1, seed: int = 0):
    """A zoo model's Relax module and example inputs (NumPy), read from the cache or made
    (``get_model`` then ``frontend.from_pytorch``) and written to it.

    Returns ``(mod, inputs, built)``: ``built`` is ``(torch_model, torch_inputs)`` when this
    call built the model, None when it read the cache.
    """
    from ..compiler import custom, frontend
    from ..compiler.patterns import STRICT_ENV
    from . import models

    # Only the package's own zoo functions: an entry added to MODELS at run time is not in
    # the key's sources.
    factory = models.MODELS.get(name)
    own = factory is not None and factory is getattr(models, name, None)
    directory = cache_dir() if own and not custom.registered() else None
    if directory is not None:
        model_key = key(name, batch, seed)
        path = entry_path(directory, model_key)
        found = read(path, model_key)
        if found is not None:
            return (*found, None)
    model, example = models.get_model(name, batch=batch, seed=seed)
    mod, _ = frontend.from_pytorch(model, example)
    inputs = [np.ascontiguousarray(t.detach().numpy()) for t in example]
    if directory is not None:
        try:
            write(path, model_key, mod, inputs)
        except ValueError:
            if os.environ.get(STRICT_ENV) == "1":
                raise
    return mod, inputs, (model, example)

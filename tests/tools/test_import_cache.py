"""The zoo's import cache (accel_codegen/tools/import_cache.py): what a process reads back is
the import it would have made; a stale, foreign or damaged file is never read; the cache can be
turned off; writes are atomic and two processes may write at once."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from accel_codegen.compiler import source_names
from accel_codegen.tools import import_cache, model_spec
from accel_codegen.tools.models import MODELS


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache directory of the test's own, named by ACCEL_CODEGEN_CACHE."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(import_cache.CACHE_ENV, str(folder))
    return folder


def _assert_same_import(mod, inputs, expected_mod, expected_inputs):
    import tvm

    tvm.ir.assert_structural_equal(mod, expected_mod)  # constants' values included
    names = source_names.binding_names(mod["main"])
    assert names == source_names.binding_names(expected_mod["main"])
    assert any(names), "the source names are the point of the comparison: none were found"
    assert dict(mod.attrs) == dict(expected_mod.attrs)
    assert len(inputs) == len(expected_inputs)
    for x, expected in zip(inputs, expected_inputs):
        assert x.dtype == expected.dtype and np.array_equal(x, expected)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_zoo_models_import_is_cached(name, zoo, tmp_path):
    """The zoo's every model is written: its file read back is its import (the module, its
    constants' values, source names and attributes), which write() checks before writing."""
    imported = zoo(name)
    model_key = import_cache.key(name)
    assert import_cache.write(import_cache.entry_path(tmp_path, model_key), model_key,
                              imported.mod, [imported.x_np])


def test_the_second_load_reads_what_the_first_made(cache):
    first = model_spec.load_model("mixed_block")
    assert first.torch_model is not None and not isinstance(first, model_spec._ZooModel)
    (path,) = cache.iterdir()
    assert import_cache.read(path, import_cache.key("lenet5")) is None  # another model's key
    assert path.name.startswith("mixed_block-") and path.suffix == ".npz"
    second = model_spec.load_model("mixed_block")
    assert isinstance(second, model_spec._ZooModel), "the second load did not read the cache"
    _assert_same_import(second.mod, second.inputs, first.mod, first.inputs)
    # its torch module, built when read, is the zoo's
    assert "_torch" not in second.__dict__
    x = second.torch_inputs[0]
    assert np.array_equal(x.numpy(), first.inputs[0])
    for (key, value), (other_key, other) in zip(second.torch_model.state_dict().items(),
                                                first.torch_model.state_dict().items()):
        assert key == other_key and bool((value == other).all()), key


def test_a_file_of_another_key_is_never_read(cache):
    model_key = import_cache.key("lenet5")
    path = import_cache.entry_path(cache, model_key)
    mod, inputs, _ = import_cache.zoo_import("lenet5")
    assert import_cache.read(path, model_key) is not None
    # everything the key holds makes another file name, and the stored key is checked too:
    for field, other in [("sources", "0" * 64), ("torch", "0.0"), ("tvm", "0.0"),
                         ("accel_codegen", "0.0"), ("batch", 2), ("format", 0)]:
        stale = {**model_key, field: other}
        assert import_cache.entry_path(cache, stale) != path, field
        assert import_cache.read(path, stale) is None, field


def test_a_model_keeps_one_file(cache):
    """Writing a model's entry deletes its entries of other keys (another package version's),
    not other models'."""
    mod, inputs, _ = import_cache.zoo_import("lenet5")
    (current,) = cache.iterdir()
    older = {**import_cache.key("lenet5"), "sources": "0" * 64}
    assert import_cache.write(import_cache.entry_path(cache, older), older, mod, inputs)
    assert not current.exists()
    other = {**import_cache.key("mixed_block"), "model": "lenet5x"}  # a name lenet5 starts
    assert import_cache.write(import_cache.entry_path(cache, other), other, mod, inputs)
    assert import_cache.write(current, import_cache.key("lenet5"), mod, inputs)
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [current.name, import_cache.entry_path(cache, other).name])


def test_a_change_to_the_package_is_another_key(tmp_path):
    """The sources' digest reads every Python file of the package: one byte changed in a copy
    of it (the zoo's) is another digest, so another key."""
    import shutil

    copy = tmp_path / "accel_codegen"
    shutil.copytree(import_cache.PACKAGE, copy, ignore=shutil.ignore_patterns("*.so", "lib"))
    assert import_cache.sources_digest(copy) == import_cache.sources_digest()
    zoo_file = copy / "tools" / "models.py"
    zoo_file.write_text(zoo_file.read_text().replace("CALIBRATION_BATCH = 4",
                                                     "CALIBRATION_BATCH = 5"))
    import_cache.sources_digest.cache_clear()
    assert import_cache.sources_digest(copy) != import_cache.sources_digest()


def test_a_damaged_file_is_made_again(cache):
    mod, inputs, built = import_cache.zoo_import("lenet5")
    assert built is not None
    (path,) = cache.iterdir()
    path.write_bytes(path.read_bytes()[:1000])  # truncated
    again, again_inputs, built = import_cache.zoo_import("lenet5")
    assert built is not None, "a truncated file was read"
    _assert_same_import(again, again_inputs, mod, inputs)
    assert import_cache.read(path, import_cache.key("lenet5")) is not None  # written again


def test_the_cache_can_be_turned_off(tmp_path, monkeypatch):
    for off in ("0", "off", "OFF", ""):
        monkeypatch.setenv(import_cache.CACHE_ENV, off)
        assert import_cache.cache_dir() is None
    monkeypatch.setenv(import_cache.CACHE_ENV, "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for _ in range(2):
        *_, built = import_cache.zoo_import("lenet5")
        assert built is not None
    assert list(tmp_path.iterdir()) == []
    # where it goes by default
    monkeypatch.delenv(import_cache.CACHE_ENV)
    assert import_cache.cache_dir() == tmp_path / "accel-codegen"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert import_cache.cache_dir() == tmp_path / "home" / ".cache" / "accel-codegen"


def test_an_unwritable_directory_leaves_the_cache_unused(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv(import_cache.CACHE_ENV, str(blocker / "cache"))  # under a file
    mod, inputs, built = import_cache.zoo_import("lenet5")
    assert built is not None and inputs[0].shape == (1, 1, 32, 32)


def test_a_module_that_does_not_read_back_is_not_written(cache, monkeypatch):
    """The check before writing can fail: a reading that loses one source name."""
    real = import_cache._module

    def lossy(fields):
        names = json.loads(str(fields["names"]))
        first = next(i for i, name in enumerate(names) if name)
        names[first] = None
        return real({**fields, "names": np.array(json.dumps(names))})

    monkeypatch.setattr(import_cache, "_module", lossy)
    with pytest.raises(ValueError, match="does not read back"):  # the suite runs strict
        import_cache.zoo_import("lenet5")
    assert not cache.exists() or list(cache.iterdir()) == []
    monkeypatch.setenv("ACCEL_CODEGEN_STRICT", "0")
    *_, built = import_cache.zoo_import("lenet5")
    assert built is not None and (not cache.exists() or list(cache.iterdir()) == [])


def test_registered_custom_primitives_bypass_the_cache(cache, monkeypatch):
    from accel_codegen.compiler import custom

    monkeypatch.setattr(custom, "registered", lambda: {"mine": object()})
    import_cache.zoo_import("lenet5")
    assert not cache.exists()


def test_a_model_added_to_the_zoo_at_run_time_bypasses_the_cache(cache, monkeypatch):
    from accel_codegen.tools import models

    monkeypatch.setitem(models.MODELS, "lenet5", lambda **kw: models.mixed_block(**kw))
    monkeypatch.setitem(models.MODELS, "mine", models.lenet5)
    for name in ("lenet5", "mine"):
        *_, built = import_cache.zoo_import(name)
        assert built is not None
    assert not cache.exists()


def test_two_processes_writing_at_once(cache):
    """Both succeed, one whole file results, no temporary file is left behind."""
    code = ("from accel_codegen.tools.import_cache import zoo_import; "
            "mod, inputs, built = zoo_import('lenet5'); print(built is not None)")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd="/") for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
    (path,) = cache.iterdir()
    assert not path.name.startswith(".tmp-")
    assert import_cache.read(path, import_cache.key("lenet5")) is not None

"""A library named relative to the working directory loads: a bare name ("r18.so"), "./r18.so"
and an absolute path give the same module (the dynamic loader reads a name without a slash as
one to search for on its own path, so the package hands it an absolute path); a missing file is
an AccelLibraryError naming it and where it was looked for."""
import os

import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen import frontend
from accel_codegen.errors import AccelLibraryError
from conftest import assert_same, run_cli, run_main


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """(directory, library file name, an input, the output of the JIT-linked build)."""
    torch.manual_seed(0)
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8), dtype=np.float32)
    mod, _ = frontend.from_pytorch(Tiny().eval(), (torch.from_numpy(x),))
    exe = ac.build(mod)
    directory = tmp_path_factory.mktemp("library_paths")
    ac.export_library(exe, directory / "tiny.so")
    return directory, "tiny.so", x, run_main(ac.virtual_machine(exe), x)


@pytest.mark.parametrize("form", ["bare", "dot-slash", "absolute"])
def test_virtual_machine_loads_a_relative_or_absolute_path(library, monkeypatch, form):
    directory, name, x, expected = library
    monkeypatch.chdir(directory)
    path = {"bare": name, "dot-slash": f"./{name}", "absolute": str(directory / name)}[form]
    assert_same(run_main(ac.virtual_machine(path), x), expected)


def test_a_path_relative_to_a_subdirectory_loads(library, monkeypatch):
    directory, name, x, expected = library
    monkeypatch.chdir(directory.parent)
    assert_same(run_main(ac.virtual_machine(os.path.join(directory.name, name)), x), expected)


def test_cli_run_takes_a_bare_name(library, monkeypatch, capsys):
    directory, name, x, expected = library
    monkeypatch.chdir(directory)
    np.save("x.npy", x)
    for path in (name, f"./{name}"):
        status, _, err = run_cli(capsys, "run", path, "--input", "x.npy", "--output", "y.npy")
        assert status == 0, err
        assert_same(np.load("y.npy"), expected)


def test_a_missing_library_is_typed_and_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AccelLibraryError, match=r"library 'absent\.so' does not exist "
                                                 r"\(looked for '.*/absent\.so'\)"):
        ac.virtual_machine("absent.so")
    with pytest.raises(AccelLibraryError, match=r"library '/nonexistent/absent\.so' does not "
                                                 r"exist$"):
        ac.virtual_machine("/nonexistent/absent.so")

"""The quick subset (``pytest -m quick``, tests/conftest.py's QUICK) cannot go stale: every
entry names a test module, and a test in it, that exists, and every layer of the suite has
entries. (Reading the files, not collecting them: this takes no time.)"""
import re
from pathlib import Path

from conftest import QUICK, _is_quick

TESTS = Path(__file__).resolve().parents[1]


def test_every_quick_entry_names_an_existing_test():
    for entry in QUICK:
        module, _, test = entry.partition("::")
        path = TESTS / module
        assert path.is_file(), f"QUICK names {module}, which does not exist"
        if test:
            name = test.split("[", 1)[0]
            assert re.search(rf"^def {re.escape(name)}\(", path.read_text(), re.M), (
                f"QUICK names {entry}: no test {name} in {module}")


def test_every_layer_of_the_suite_has_quick_tests():
    layers = {entry.split("/", 1)[0] for entry in QUICK}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    assert folders <= layers, f"no quick tests in {sorted(folders - layers)}"


def test_entries_select_modules_tests_and_parameters():
    assert _is_quick("tests/sim/test_config.py::test_anything[x]")
    assert _is_quick("tests/compiler/test_partition.py::test_host_ops_with_reasons")
    assert _is_quick("tests/flow/test_flow.py::test_concat_split_and_channel_shuffle_run_on_the_bdma[1]")
    assert not _is_quick("tests/flow/test_flow.py::test_concat_split_and_channel_shuffle_run_on_the_bdma[3]")
    assert not _is_quick("tests/compiler/test_partition.py::test_host_ops_with_reasons_too")
    assert not _is_quick("tests/tools/test_readme.py::test_readme_block_runs_verbatim[sh-line1]")

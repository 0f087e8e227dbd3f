"""The README runs as written: every ```python block and every command line of every ```sh
block, verbatim, each block in a temporary folder of its own (the later lines of a block use
the files its earlier lines write, as a user's shell would). A python block runs in a fresh
interpreter with that folder as its working directory; a command line runs in bash there.

Nothing is skipped silently. Of the set-up commands (the README's first section, run from a
clone's root: the folder gets ``examples`` linked to this checkout's, as a clone has them), and
of the optional quick test command, the parts in SETUP are not run again, each for the reason it states, and the test checks instead
what they would have done. Any other fenced block (a language other than python and sh) fails
the test, so that a block cannot be added that this test does not run.

The commands run on the README's own models (ResNet-18 and -50): a few minutes on two cores,
the slow ones bounded by their flags in the README (repeats, calibration inputs), not here.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

#: Set-up commands not run again, each with why; the test checks their effect instead.
SETUP = {
    "pip install torch==2.13.0": "installs the pinned torch: checked below (torch.__version__)",
    'pip install ".[test]"': "installs this checkout: checked below (accel_codegen is "
                             "imported from it)",
    "pytest": "runs the whole suite, which this test is part of (CI runs it: .ci/run)",
    "pytest -m quick": "runs the quick subset of the suite, which CI runs whole (.ci/run); "
                       "tests/tools/test_quick_subset.py checks the subset's selection",
}

_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)


def _blocks():
    """(id, language, text) of every fenced block of the README, in order."""
    text = README.read_text()
    blocks = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        blocks.append((f"{match[1] or 'plain'}-line{line}", match[1].strip(), match[2]))
    return blocks


def _commands(block: str):
    """The command lines of a sh block: continuation lines joined, blank lines and comment
    lines dropped."""
    commands, pending = [], ""
    for line in block.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line = pending + line
        pending = ""
        if line.strip() and not line.lstrip().startswith("#"):
            commands.append(line.strip())
    assert not pending, f"a sh block ends in a continuation line: {pending!r}"
    return commands


def _without_setup(command: str):
    """The command with the SETUP parts of its `&&` list removed (None: nothing left)."""
    parts = [part.strip() for part in command.split("&&")]
    kept = [part for part in parts if part not in SETUP]
    return " && ".join(kept) if kept else None


def _environment():
    """This interpreter's bin directory first, so that `python` and `accel-codegen` are the
    ones this test runs under."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("MPLBACKEND", "Agg")
    return env


def _run(argv, cwd, what, timeout=900):
    proc = subprocess.run(argv, cwd=cwd, env=_environment(), capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(
            f"{what}\nexit status {proc.returncode}\n--- stdout (end) ---\n"
            f"{proc.stdout[-3000:]}\n--- stderr (end) ---\n{proc.stderr[-5000:]}")
    return proc


BLOCKS = _blocks()


def test_the_readme_has_only_blocks_this_test_runs():
    languages = {language for _, language, _ in BLOCKS}
    assert languages <= {"python", "sh"}, f"blocks this test does not run: {languages}"
    assert sum(language == "python" for _, language, _ in BLOCKS) >= 3
    assert sum(language == "sh" for _, language, _ in BLOCKS) >= 3


def test_setup_commands_not_run_are_in_the_readme_and_in_effect():
    """Every SETUP entry is a part of a README command (the list cannot go stale), and what it
    does is done: the pinned torch, this checkout's version of the package, and every pinned
    requirement of its [test] extra at its pin."""
    import importlib.metadata
    import tomllib

    parts = [part.strip() for _, language, text in BLOCKS if language == "sh"
             for command in _commands(text) for part in command.split("&&")]
    for command in SETUP:
        assert command in parts, f"SETUP lists {command!r}, which the README does not run"
    pinned = re.search(r"torch==(\S+)", " ".join(SETUP))[1]
    assert importlib.metadata.version("torch").split("+")[0] == pinned
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert importlib.metadata.version(project["name"]) == project["version"]
    for requirement in project["optional-dependencies"]["test"]:
        name, _, version = requirement.partition("==")
        assert importlib.metadata.version(name).split("+")[0] == version, requirement


def test_the_readme_loads_a_library_by_a_bare_name():
    """The case that failed (issue 30): a library named without a directory, from the
    working directory, in both the Python API and the command line."""
    python = "\n".join(text for _, language, text in BLOCKS if language == "python")
    shell = "\n".join(text for _, language, text in BLOCKS if language == "sh")
    assert re.search(r'virtual_machine\("[\w.-]+\.so"\)', python)
    assert re.search(r"accel-codegen run [\w.-]+\.so ", shell)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b[1] in ("python", "sh")],
                         ids=[b[0] for b in BLOCKS if b[1] in ("python", "sh")])
def test_readme_block_runs_verbatim(block, tmp_path):
    name, language, text = block
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    if language == "python":
        script = tmp_path / "block.py"
        script.write_text(text)
        _run([sys.executable, str(script)], tmp_path, f"README {name}:\n{text}")
        return
    for command in _commands(text):
        command = _without_setup(command)
        if command is not None:  # None: only SETUP parts (the test lines: pytest, -m quick)
            _run(["bash", "-e", "-o", "pipefail", "-c", command], tmp_path,
                 f"README {name}: {command}")

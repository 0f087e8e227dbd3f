"""The package's layers (issue 28, item 3): sim < quantization < compiler < flows < tools, and no
import cycle in any package, as the import-linter contracts of pyproject.toml state them.

lint-imports runs in a child process away from the repository root (it puts its working
directory first on sys.path, and CI tests the installed package, not the source tree); it reads
the contracts from the repository's pyproject.toml."""
import subprocess
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
LINT = ("import sys; from importlinter.cli import lint_imports_command; "
        "sys.exit(lint_imports_command())")


def _lint(config: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LINT, str(config), "--no-cache"],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_package_keeps_its_import_contracts(tmp_path):
    result = _lint(PYPROJECT, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


def test_a_broken_contract_fails_the_check(tmp_path):
    # the same checker, told that the simulator sits above the compiler: sim imports nothing
    # of the compiler, but the compiler imports sim, so the contract is broken and named
    config = tmp_path / "inverted.toml"
    config.write_text('[tool.importlinter]\nroot_package = "accel_codegen"\n\n'
                      '[[tool.importlinter.contracts]]\nname = "sim above compiler"\n'
                      'type = "layers"\ncontainers = ["accel_codegen"]\n'
                      'layers = ["sim", "compiler"]\n')
    result = _lint(config, tmp_path)
    assert result.returncode != 0
    assert "sim above compiler BROKEN" in result.stdout
    assert "accel_codegen.compiler" in result.stdout and "accel_codegen.sim" in result.stdout

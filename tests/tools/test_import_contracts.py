"""The package's layers (issue 28, item 3): sim < quantization < compiler < flows < tools, no
import cycle in any package, as the import-linter contracts of pyproject.toml state them, and
no private name imported across packages (import-linter has no such contract: an AST walk).

lint-imports runs in a child process away from the repository root (it puts its working
directory first on sys.path, and CI tests the installed package, not the source tree); it reads
the contracts from the repository's pyproject.toml."""
import ast
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


def _module_of(package_dir: Path, path: Path) -> str:
    parts = path.relative_to(package_dir.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(package_dir: Path, module: str) -> bool:
    return (package_dir.parent / module.replace(".", "/")).is_dir()


def _is_module(package_dir: Path, module: str) -> bool:
    """A package, a source file or a compiled extension (``_ffi.cpython-311-x86_64.so``)."""
    path = package_dir.parent / module.replace(".", "/")
    return path.is_dir() or path.with_suffix(".py").exists() or \
        any(path.parent.glob(path.name + ".*.so"))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(package_dir: Path):
    """Each ``_name`` that a module outside its package imports (``from pkg.module import
    _name``, ``from pkg import _module``) or reads through its module (``module._name``), named
    with its place. A private name or module is its package's own, and its subpackages'."""
    def owner(target: str) -> str:  # the package whose private names ``target``'s are
        return target if _is_package(package_dir, target) else target.rpartition(".")[0]

    for path in sorted(package_dir.rglob("*.py")):
        module = _module_of(package_dir, path)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]

        def outside(target: str) -> bool:
            return not (package + ".").startswith(owner(target) + ".")

        tree = ast.parse(path.read_text(), str(path))
        aliases = {}  # a local name -> the module of another package it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] \
                    if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                if not target.startswith(package_dir.name):
                    continue
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    if _private(alias.name) and outside(target):
                        yield f"{module}:{node.lineno} imports {full}"
                    elif _is_module(package_dir, full) and outside(full):
                        aliases[alias.asname or alias.name] = full
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(package_dir.name + ".") and alias.asname and \
                            outside(alias.name):
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id in aliases and _private(node.attr):
                yield f"{module}:{node.lineno} reads {aliases[node.value.id]}.{node.attr}"


def test_no_module_imports_another_packages_private_names():
    import accel_codegen

    assert list(private_imports(Path(accel_codegen.__file__).parent)) == []


def test_the_private_import_check_names_each_kind(tmp_path):
    pkg = tmp_path / "pkg"
    for name in ("a", "b", "a/deep"):
        (pkg / name).mkdir(parents=True)
        (pkg / name / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "_ffi.py").write_text("lib = 1\n")
    (pkg / "a" / "m.py").write_text("_hidden = 1\nshown = 2\n")
    (pkg / "a" / "same.py").write_text("from .m import _hidden\n")   # its own package: fine
    (pkg / "a" / "deep" / "ffi.py").write_text("from ... import _ffi\n")  # below pkg: fine
    (pkg / "b" / "n.py").write_text("from ..a.m import _hidden, shown\n"
                                    "from ..a import m\nx = m._hidden\n"
                                    "import pkg.a.m as mm\ny = mm._hidden\n")
    (pkg / "b" / "o.py").write_text("from ..a import _private_module\n")
    (pkg / "a" / "_private_module.py").write_text("")
    assert list(private_imports(pkg)) == [
        "pkg.b.n:1 imports pkg.a.m._hidden", "pkg.b.n:3 reads pkg.a.m._hidden",
        "pkg.b.n:5 reads pkg.a.m._hidden", "pkg.b.o:1 imports pkg.a._private_module"]

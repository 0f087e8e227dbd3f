"""Issue 28's size goals, held: no function of the package over 100 lines and no class over
300 (a class's methods included), and no C file (source or header) over 1,000 lines, so that a
responsibility that grows moves to a module or file of its own instead of making one definition
longer."""
import ast
from pathlib import Path

import accel_codegen

PACKAGE = Path(accel_codegen.__file__).parent
REPOSITORY = Path(__file__).resolve().parents[2]
C_LIMIT = 1000
LIMITS = {ast.FunctionDef: 100, ast.AsyncFunctionDef: 100, ast.ClassDef: 300}


def oversized(root: Path):
    """Each function or class under ``root`` longer than its limit, named with its place."""
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            limit = LIMITS.get(type(node))
            if limit is not None and node.end_lineno - node.lineno + 1 > limit:
                yield (f"{path.relative_to(root.parent)}:{node.lineno} {node.name}: "
                       f"{node.end_lineno - node.lineno + 1} lines (at most {limit})")


def test_no_function_over_100_lines_and_no_class_over_300():
    assert list(oversized(PACKAGE)) == []


def test_the_check_names_an_oversized_method(tmp_path):
    body = "\n".join(f"        x{i} = {i}" for i in range(100))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(f"class Short:\n    def long(self):\n{body}\n")
    assert list(oversized(tmp_path / "pkg")) == ["pkg/m.py:2 long: 101 lines (at most 100)"]


def long_c_files(root: Path):
    """Each C source or header under ``root`` (the build tree aside) over C_LIMIT lines."""
    for path in sorted(root.rglob("*.[ch]")):
        if "build" in path.relative_to(root).parts:
            continue
        lines = len(path.read_text(errors="replace").splitlines())
        if lines > C_LIMIT:
            yield f"{path.relative_to(root)}: {lines} lines (at most {C_LIMIT})"


def test_no_c_file_over_1000_lines(tmp_path):
    assert list(long_c_files(REPOSITORY)) == []
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "long.h").write_text("int x;\n" * (C_LIMIT + 1))
    (tmp_path / "csrc" / "short.c").write_text("int y;\n" * C_LIMIT)
    assert list(long_c_files(tmp_path)) == [f"csrc/long.h: {C_LIMIT + 1} lines (at most 1000)"]

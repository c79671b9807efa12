"""The package's shape: stages in a fixed order, none importing a later one, and modules of at most 400 lines.
The lists of exceptions below are debts: a change may shorten them, never lengthen them."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

TUNER = Path(__file__).resolve().parents[1] / "tuner"
# A layer's data flows down this list: each stage may import those before it, never one after it.
STAGES = ("core", "families", "build", "measure", "store", "search", "analysis", "importers", "pipeline",
          "torch_ops", "cli")
MAX_LINES = 400
# Imports of a later stage still to remove (none is left: a change keeps it so).
UPWARD_IMPORTS: set[tuple[str, str]] = set()
OVERSIZED = {
    "families/base.py", "families/sm90_dsl/kernel.py",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(TUNER.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every tuner module the file imports, at the top or inside a function."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.update(f"{module}.{alias.name}" for alias in node.names)
            found.add(module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("tuner.")}


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else None


def modules() -> list[Path]:
    return sorted(path for path in TUNER.rglob("*.py") if "__pycache__" not in path.parts)


def test_every_module_belongs_to_a_stage():
    loose = [module_name(path) for path in modules() if module_name(path) != "tuner" and stage_of(module_name(path)) is None]
    assert not loose, f"modules outside the stage packages {STAGES}: {loose}"


def test_no_stage_imports_a_later_one():
    known = {module_name(path) for path in modules()}
    upward = set()
    for path in modules():
        own = stage_of(module_name(path))
        for target in imported_modules(path):
            module = target if target in known else target.rpartition(".")[0]  # a name imported from a module
            other = stage_of(module)
            if own and other and STAGES.index(other) > STAGES.index(own):
                upward.add((module_name(path), module))
    assert not upward - UPWARD_IMPORTS, f"imports of a later stage: {sorted(upward - UPWARD_IMPORTS)}"
    assert not UPWARD_IMPORTS - upward, f"fixed, so take them off UPWARD_IMPORTS: {sorted(UPWARD_IMPORTS - upward)}"


@pytest.mark.parametrize("path", modules(), ids=lambda path: str(path.relative_to(TUNER)))
def test_a_module_is_at_most_400_lines(path):
    relative = str(path.relative_to(TUNER))
    lines = len(path.read_text().splitlines())
    if relative in OVERSIZED:
        assert lines > MAX_LINES, f"{relative} is {lines} lines now: take it off OVERSIZED"
    else:
        assert lines <= MAX_LINES, f"{relative} is {lines} lines; split it by role (at most {MAX_LINES})"

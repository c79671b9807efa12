"""What `pip install .` (not -e) ships: every package under tuner/ (each kernel family is one) and every
template the code generator reads. A wheel once shipped tuner/ alone, without tuner/families/."""
import fnmatch
import tomllib
from pathlib import Path

from setuptools import find_packages

REPO = Path(__file__).resolve().parents[1]


def test_every_tuner_package_and_template_is_shipped():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    shipped = set(find_packages(where=str(REPO), include=config["packages"]["find"]["include"]))
    packages = {".".join(path.parent.relative_to(REPO).parts) for path in (REPO / "tuner").rglob("__init__.py")}
    assert packages <= shipped, packages - shipped
    assert {"tuner.families.sm90_s2d", "tuner.families.sm90_gemm"} <= shipped
    globs = config["package-data"]["tuner"]
    templates = [path.relative_to(REPO / "tuner").as_posix() for path in (REPO / "tuner").rglob("templates/*")]
    assert len(templates) >= 10
    for template in templates:
        assert any(fnmatch.fnmatch(template, glob) for glob in globs), template

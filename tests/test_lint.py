"""pyflakes over the kit's own code: undefined names and unused imports are bugs
waiting for the next JAX release. (Stubs are left out: their imports are for
the learner.)"""
import io
from pathlib import Path

import pytest

pyflakes_api = pytest.importorskip("pyflakes.api", reason="pip install -e '.[dev]'")
from pyflakes.reporter import Reporter  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CHECKED = sorted([*ROOT.glob("pytest_pallas_hints/**/*.py"), *ROOT.glob("reference/*.py"),
                  *ROOT.glob("exercises/test_*.py"), *ROOT.glob("tests/*.py"), *ROOT.glob("tests/lessons/*.py"),
                  *ROOT.glob("benchmarks/*.py"), ROOT / "conftest.py"])


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_pyflakes_warnings(path):
    out = io.StringIO()
    count = pyflakes_api.check(path.read_text(), str(path), Reporter(out, out))
    assert count == 0, out.getvalue()

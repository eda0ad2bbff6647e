"""The rule for exercise files, on its own: what passes, what is refused and why."""
import ast
from pathlib import Path

import pytest

from pytest_pallas_hints import rules

ROOT = Path(__file__).resolve().parent.parent


def broken(code: str):
    return rules.check_tree(ast.parse(code), code, rules.ALLOWED)


@pytest.mark.parametrize("path", sorted([*ROOT.glob("reference/*.py"),
                                         *ROOT.glob("exercises/[!t]*.py")]),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_references_and_the_stubs_follow_the_rule(path):
    assert rules.check(path) is None


@pytest.mark.parametrize("code", [
    "import jax\nimport jax.numpy as jnp\nfrom jax.experimental import pallas as pl\n"
    "from jax.experimental.pallas import tpu as pltpu\nimport numpy as np\nimport functools\n"
    "x = jax.lax.fori_loop\ny = jnp.float32\nz = np.finfo\nw = pl.BlockSpec\nv = jax.nn.gelu\n",
    "from functools import partial\nimport math\nr = math.sqrt(2)\n",
    "def f(x):\n    print(x.shape)\n    return min(x, 2)\n",
])
def test_what_a_kernel_needs_is_allowed(code):
    assert broken(code) is None


@pytest.mark.parametrize("code, says", [
    ("import os\n", "`import os` is not allowed"),
    ("import numpy.ma\n", "`import numpy.ma` is not allowed"),
    ("from os import path\n", "`import os.path` is not allowed"),
    ("from jax._src import core\n", "`import jax._src.core` is not allowed"),
    ("from . import basics\n", "relative imports"),
    ("from jax import *\n", "import *"),
    ("import numpy as np\nb = np.ma.core.builtins\n", "reaches the module numpy.ma"),
    ("import jax\nb = jax.version\n", "reaches the module jax.version"),
    ("import jax.numpy as jnp\nb = jnp.linalg\n", "reaches the module jax.numpy.linalg"),
    ("x = (1).__class__\n", "attributes starting with _"),
    ("x = __builtins__\n", "`__builtins__` is not allowed"),
    ("def g():\n    yield\nf = g().gi_frame.f_back\n", "introspection"),
    ("t = type(1)\n", "`type` is not allowed"),
    ("e = eval\n", "`eval` is not allowed"),
    ("open('x')\n", "`open` is not allowed"),
    ("from jax.experimental.pallas.ops.tpu import flash_attention\n", "JAX's own library"),
    ("import jax.experimental.pallas.ops\n", "JAX's own library"),
])
def test_what_could_reach_the_judge_is_refused_with_its_line(code, says):
    found = broken(code)
    assert found is not None and says in found.rule
    assert found.line == len(code.splitlines())


def test_a_rule_break_fails_the_chapter_with_its_line(kit):
    kit.write("exercises/basics.py", "import os\n" + (ROOT / "exercises" / "basics.py").read_text())
    out = kit.run("exercises/test_basics.py", "-k", "add_one").stdout.str()
    assert "exercises/basics.py:1 breaks the rule for exercise files" in out
    assert "does not run: fix exercises/basics.py first" in out

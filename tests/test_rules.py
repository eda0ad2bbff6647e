"""The rule for exercise files, on its own: what passes, what is refused and why.

The rule is an allowlist (pytest_pallas_hints/vocabulary.toml). Each attack class
of issue 19 has cases here, each refused with its line before the file runs; the
references and the stubs define what the vocabulary must hold."""
import tomllib
import types
from pathlib import Path

import pytest

from pytest_pallas_hints import rules
from tests.test_chapters import flat

ROOT = Path(__file__).resolve().parent.parent
HEAD = ("import functools\nimport jax\nimport jax.numpy as jnp\nimport numpy as np\n"
        "from jax.experimental import pallas as pl\n")


def broken(code: str):
    return rules.check_source(code)


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
    "import jax.experimental.pallas\nw = jax.experimental.pallas.when\n",
    HEAD + "def kernel(x_ref, o_ref, acc_ref):\n    acc_ref[...] += x_ref[...]\n"
           "    o_ref.at[0][...] = acc_ref[0]\n    o_ref[:, 0] = jnp.zeros(8)\n",
    HEAD + "@functools.partial(jax.jit, static_argnames=('n',))\ndef f(x, n):\n"
           "    @pl.when(n > 0)\n    def _():\n        pass\n    return x\n",
    HEAD + "@jax.custom_jvp\ndef f(x):\n    return x\n@f.defjvp\ndef f_jvp(p, t):\n"
           "    return p[0], t[0]\n",
    HEAD + "counter = 0\ndef bump():\n    global counter\n    counter += 1\n",
    HEAD + "def f(xs):\n    table = {}\n    table['a'] = [x.T for x in xs]\n"
           "    table.update(b=1)\n    return sorted(table.items())\n",
    HEAD + "def f(id, type):\n    return id + type\n",   # its own names, not the builtins
    HEAD + "ignore = lambda *_, **__: None\n",   # JAX's Hopper matmul: underscores only
])
def test_what_a_kernel_needs_is_allowed(code):
    assert broken(code) is None


CASES = {
    # class 1: a module held as a value reaches other modules through it
    "value: in a list": ("mods = [np]\n", "`np` is a module"),
    "value: assigned": ("m = np\n", "`np` is a module"),
    "value: a default": ("def f(x, m=np):\n    return m\n", "`np` is a module"),
    "value: returned": ("def f():\n    return jnp\n", "`jnp` is a module"),
    "value: compared": ("ok = np is None\n", "`np` is a module"),
    "value: passed": ("print(pl)\n", "`pl` is a module"),
    "value: a submodule": ("m = jax.numpy\n", "`jax.numpy` is a module"),
    "value: rebound": ("def f():\n    jnp = 1\n    return jnp\n", "`jnp` is a module"),
    "value: a parameter": ("def f(np):\n    return np.lib\n", "`np` is a module"),
    # class 1: a walk through submodules to sys
    "walk: numpy.lib": ("u = np.lib.utils.sys\n", "`np.lib` (numpy.lib) is not allowed"),
    "walk: numpy.ma": ("b = np.ma.core.builtins\n", "`np.ma` (numpy.ma) is not allowed"),
    "walk: jax.version": ("w = jax.version.os\n", "`jax.version` is not allowed"),
    "walk: jnp.linalg": ("n = jnp.linalg.norm\n", "`jnp.linalg` (jax.numpy.linalg) is not"),
    "walk: from-import": ("from numpy import lib\n", "`numpy.lib` is not allowed"),
    "walk: import": ("import jax.tree_util\n", "`import jax.tree_util` is not allowed"),
    "walk: a function's globals": ("g = jnp.dot.__globals__\n", "attributes starting with _"),
    "walk: jax.config": ("jax.config.update('jax_enable_x64', True)\n", "`jax.config` is not"),
    "walk: a mutable module value": ("np.sctypeDict.clear()\n", "`np.sctypeDict` (numpy.sctypeDict) is not"),
    "walk: the interpreter's switch": (
        "from jax.experimental.pallas import tpu as pltpu\n"
        "p = pltpu.force_tpu_interpret_mode\n", "`pltpu.force_tpu_interpret_mode` ("),
    "walk: live arrays": ("a = jax.live_arrays()\n", "`jax.live_arrays` is not"),
    "walk: a file": ("x = np.load('expected.npy')\n", "`np.load` (numpy.load) is not"),
    # class 2: changing an allowed module
    "write: a module's function": ("np.allclose = lambda *a, **k: True\n",
                                   "assigning to or deleting an attribute"),
    "write: augmented": ("np.e += 1\n", "assigning to or deleting an attribute"),
    "write: deleted": ("del np.isclose\n", "assigning to or deleting an attribute"),
    "write: an attribute of a value": ("def f(x):\n    x.shape = (1,)\n",
                                       "assigning to or deleting an attribute"),
    "write: into a module's value": ("np.e[0] = 1\n", "a store into something this file"),
    "write: in place by out=": ("def f(a, b):\n    np.add(a, b, out=a)\n", "`out=` is not"),
    "write: global of a module": ("def f():\n    global np\n", "`global np`"),
    "write: global of a name not defined": ("def f():\n    global hidden\n    hidden = 1\n",
                                            "`global hidden`"),
    # escape attributes
    "escape: gi_frame": ("def g():\n    yield\nf = g().gi_frame\n", "introspection"),
    "escape: f_back": ("def f(frame):\n    return frame.f_back\n", "introspection"),
    "escape: tb_frame": ("def f(tb):\n    return tb.tb_frame\n", "introspection"),
    "escape: f_globals": ("def f(frame):\n    return frame.f_globals\n", "introspection"),
    "escape: cell_contents": ("def f(c):\n    return c.cell_contents\n", "introspection"),
    "escape: a private attribute": ("x = pl._core\n", "attributes starting with _"),
    "escape: a dunder": ("x = (1).__class__\n", "attributes starting with _"),
    "escape: a dunder name": ("x = __builtins__\n", "dunder names"),
    "escape: format fields": ("s = '{0.__class__}'.format(1)\n", "`.format` is not"),
    "escape: an unknown attribute": ("def f(x):\n    return x.addressable_data(0)\n",
                                     "`.addressable_data` is not"),
    # forbidden builtins
    "builtin: getattr": ("x = getattr(print, 'x')\n", "`getattr` is not allowed"),
    "builtin: vars": ("v = vars()\n", "`vars` is not allowed"),
    "builtin: globals": ("g = globals()\n", "`globals` is not allowed"),
    "builtin: eval": ("e = eval\n", "`eval` is not allowed"),
    "builtin: exec": ("exec('1')\n", "`exec` is not allowed"),
    "builtin: open": ("open('x')\n", "`open` is not allowed"),
    "builtin: __import__": ("m = __import__('os')\n", "dunder names"),
    "escape: a private name": ("def f(__x):\n    return __x\n", "dunder names"),
    "builtin: type": ("t = type(1)\n", "`type` is not allowed"),
    "builtin: object": ("o = object()\n", "`object` is not allowed"),
    "builtin: hasattr": ("h = hasattr(print, 'x')\n", "`hasattr` is not allowed"),
    "builtin: unlisted": ("b = bytearray(3)\n", "`bytearray` is not a builtin"),
    "builtin: in a function": ("def f(x):\n    return setattr(x, 'y', 1)\n",
                               "`setattr` is not allowed"),
    # classes and decorators
    "class": ("class A:\n    pass\n", "class statements"),
    "decorator: a cache": ("@functools.lru_cache\ndef f(x):\n    return x\n",
                           "`@functools.lru_cache` is not a decorator"),
    "decorator: a function of the file": (
        "def hook(f):\n    return f\n@hook\ndef g():\n    pass\n", "`@hook` is not a decorator"),
    "match": ("def f(x):\n    match x:\n        case _:\n            pass\n", "match statements"),
    "async": ("async def f():\n    pass\n", "async code"),
    # imports
    "import: os": ("import os\n", "`import os` is not allowed"),
    "import: inside a function": ("def f():\n    import math\n", "imports go at the top"),
    "import: relative": ("from . import basics\n", "relative imports"),
    "import: star": ("from jax import *\n", "import *"),
    "import: JAX's kernels": ("from jax.experimental.pallas.ops.tpu import flash_attention\n",
                              "JAX's own library"),
    "import: JAX's kernels, by module": ("import jax.experimental.pallas.ops\n",
                                         "JAX's own library"),
    "keyword: interpret": ("def f(k, x):\n    return pl.pallas_call(k, out_shape=x, "
                           "interpret=True)(x)\n", "`interpret=` is not allowed"),
}


@pytest.mark.parametrize("code, says", CASES.values(), ids=CASES.keys())
def test_what_could_reach_the_judge_is_refused_before_it_runs_with_its_line(code, says):
    found = broken(HEAD + code)
    assert found is not None, "not refused"
    assert says in found.rule, found.rule
    refused_line = (HEAD + code).splitlines()[found.line - 1]
    assert found.line > HEAD.count("\n") and refused_line.strip() == found.code.strip()


def test_the_line_named_is_the_use_not_an_earlier_own_name():
    code = HEAD + "def f(getattr):\n    return getattr\n\ndef g(x):\n    return getattr(x, 'y')\n"
    found = broken(code)
    assert found.line == code.splitlines().index("    return getattr(x, 'y')") + 1


# ---------------------------------------------------------------- typos ---

def test_a_name_bound_nowhere_is_a_typo_not_a_rule_break():
    """A name no scope binds and no builtin has raises NameError where it is read: only
    the code that reads it fails, so the rule lets the file run and names it a typo,
    with the names it is closest to; a real builtin off the list is still the rule."""
    code = HEAD + ("def add_kernel(x_ref, y_ref, o_ref):\n"
                   "    o_ref[...] = x_ref[...] + y_reff[...]\n\n"
                   "def scale(x):\n    return x * jnpp.float32(2)\n")
    assert broken(code) is None
    found = rules.typos(code)
    assert [(t.name, t.line, t.matches[:1]) for t in found] == [
        ("y_reff", HEAD.count("\n") + 2, ("y_ref",)), ("jnpp", HEAD.count("\n") + 5, ("jnp",))]
    assert found[0].code == "    o_ref[...] = x_ref[...] + y_reff[...]"
    assert found[0].column == code.splitlines()[found[0].line - 1].index("y_reff")
    assert rules.typos(HEAD + "def f(x):\n    return bytearray(x)\n") == []
    assert "`bytearray` is not a builtin" in broken(HEAD + "def f(x):\n    return bytearray(x)\n").rule
    assert rules.typos(HEAD + "def f(x):\n    return zzz_q\n")[0].matches == ()


# ---------------------------------------------------------- the vocabulary ---

def test_the_vocabulary_names_no_module_and_no_mutable_value():
    """What a listed name gives is a function, a class, a constant or an enum: never a
    module (a way out) or a container every caller shares (a way to change the judge)."""
    words = rules.vocabulary()
    for module, names in words.modules.items():
        real = __import__(module, fromlist=["_"])
        for name in names:
            value = getattr(real, name, None)
            assert not isinstance(value, types.ModuleType), f"{module}.{name} is a module"
            assert not isinstance(value, (dict, list, set, types.SimpleNamespace)), \
                f"{module}.{name} is a mutable {type(value).__name__}"
            assert not rules._refused_in(words, module, name), \
                f"{module}.{name} is both allowed and refused"


def test_the_vocabulary_keeps_out_what_reaches_around_the_language():
    words = rules.vocabulary()
    assert not (words.builtins & rules.REACHING)
    assert not (words.values & rules.INTROSPECTION)
    assert not {w for w in words.values if w.startswith("_")}
    for out in ("format", "format_map", "func", "delete", "tofile", "dump", "fill",
                "unsafe_buffer_pointer", "def_impl", "lower", "compile"):
        assert out not in words.values, out


def test_the_vocabulary_file_is_what_the_rule_reads():
    data = tomllib.loads(rules.VOCABULARY.read_text())
    assert set(data) == {"never", "modules", "values", "builtins", "decorators"}
    assert set(data["modules"]) == set(rules.vocabulary().modules)


def test_review_lists_what_a_new_release_adds():
    words = rules.vocabulary()
    fewer = rules.Vocabulary({**words.modules, "math": words.modules["math"] - {"sqrt"}},
                             words.refused, words.never, words.values, words.builtins,
                             words.decorators)
    assert "sqrt" in rules.review(fewer)["math"]
    assert "math" not in rules.review(words)


# What JAX's own Pallas kernels (jax/experimental/pallas/ops) use from the modules an
# exercise file may import, that the vocabulary keeps out, and why. Everything else they
# use from those modules is admitted: the test below reads every kernel file of the
# installed JAX, so a release that starts using a new name fails it until the name is
# sorted into the vocabulary or here.
REFUSED_OF_JAX_KERNELS = {
    "jax._src": "JAX's internals: no stable API, and a way around every list",
    "jax.config": "a global switch: it would change what the checks see",
    "jax.default_matmul_precision": "a global switch (a context for every dot after it)",
    "functools.lru_cache": "a cache keeps state from one call to the next",
    **dict.fromkeys([
        "jax.devices", "jax.device_count", "jax.local_devices", "jax.local_device_count",
        "jax.process_count", "jax.make_mesh", "jax.set_mesh", "jax.sharding.Mesh",
        "jax.sharding.AxisType", "jax.sharding.NamedSharding", "jax.sharding.reshard",
        "jax.sharding.get_abstract_mesh"],
        "the tests build the mesh and place the arrays (the host side of JAX's examples)"),
    **dict.fromkeys(["jax.random", "numpy.random", "numpy.testing"],
                    "the inputs and the checks of JAX's examples: the tests make and check "
                    "them"),
    "jax.debug": "host callbacks from a kernel; it prints with pl.debug_print",
    "jax.tree_util": "register_pytree_node_class is class machinery (the rule has no class)",
    "jax.ad_checkpoint": "rematerialisation policies of a training step, not of a kernel",
    "jax.experimental.pallas.triton": "the Triton backend: the GPU chapter is Mosaic GPU",
    "jax.ShapeDtypeStruct.like": "not needed: jax.ShapeDtypeStruct(x.shape, x.dtype)",
    "jax.lax.DotAlgorithmPreset.ANY_F8_ANY_F8_F32": "float8 products: no chapter teaches them",
    "jax.experimental.pallas.mosaic_gpu.Layout.TCGEN05": "Blackwell's tensor memory: the GPU "
                                                         "chapter is Hopper",
}


def used_from_listed_modules(source: str, words) -> set[str]:
    """The names a file takes from the vocabulary's modules ("jax.lax.scan"), the
    submodules it reaches that have no section ("jax.random"), and the attributes it
    reads of an admitted name ("jax.experimental.pallas.DeviceIdType.MESH") that
    ``[values]`` does not list."""
    import ast

    tree = ast.parse(source)
    alias, used = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                alias[a.asname or a.name.split(".")[0]] = a.name if a.asname \
                    else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if f"{node.module}.{a.name}" in words.modules:
                    alias[a.asname or a.name] = f"{node.module}.{a.name}"
                elif node.module in words.modules:
                    used.add(f"{node.module}.{a.name}")
    for node in ast.walk(tree):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in alias or not parts:
            continue
        module, parts = alias[node.id], parts[::-1]
        while parts and f"{module}.{parts[0]}" in words.modules:
            module, parts = f"{module}.{parts[0]}", parts[1:]
        if module not in words.modules or not parts:
            continue
        used.add(f"{module}.{parts[0]}")
        if len(parts) > 1 and parts[0] in words.modules[module] \
                and parts[1] not in words.values:   # (a refused name's are refused too)
            used.add(f"{module}.{parts[0]}.{parts[1]}")
    return used


def _admitted(words, name: str) -> bool:
    module, _, member = name.rpartition(".")
    if module in words.modules:
        return member in words.modules[module]
    return name in words.modules    # a submodule with a section of its own


def test_what_jax_kernels_use_is_admitted_or_refused_for_a_stated_reason():
    import jax

    words = rules.vocabulary()
    kernels = Path(jax.__file__).parent / "experimental" / "pallas" / "ops"
    used = set().union(*(used_from_listed_modules(path.read_text(), words)
                         for path in sorted(kernels.rglob("*.py"))))
    assert len(used) > 100     # the kernels were read
    unsorted = sorted(name for name in used if not _admitted(words, name)
                      and name not in REFUSED_OF_JAX_KERNELS)
    assert not unsorted, ("JAX's own kernels use names the vocabulary neither admits nor "
                          f"refuses here with a reason: {unsorted}")
    for name in REFUSED_OF_JAX_KERNELS:
        assert not _admitted(words, name), f"{name} is admitted and listed as refused"


@pytest.mark.parametrize("code", [
    "from jax.experimental import pallas as pl\nd = pl.DeviceIdType.MESH\n",
    "from jax.experimental.pallas import tpu as pltpu\nd = pltpu.DeviceIdType.MESH\n",
    "from jax.experimental.pallas import mosaic_gpu as plgpu\n"
    "s = plgpu.LoweringSemantics.Warpgroup\n",
    "from jax import lax\ndef f(x):\n    return lax.optimization_barrier(x)\n",
    "from jax.experimental.pallas import tpu as pltpu\n"
    "def f(pipeline):\n    return pipeline.get_allocations()\n",
    "import jax\ndef f(x: jax.typing.ArrayLike):\n    return jax.tree.leaves(x)\n",
])
def test_the_api_jax_kernels_and_the_pallas_docs_use_is_admitted(code):
    assert broken(code) is None


# --------------------------------------------------------------- in a run ---

def test_a_rule_break_fails_the_chapter_with_its_line(kit):
    kit.write("exercises/basics.py", "import os\n" + (ROOT / "exercises" / "basics.py").read_text())
    out = kit.run("exercises/test_basics.py", "-k", "add_one").stdout.str()
    assert "exercises/basics.py:1 breaks the rule for exercise files" in out
    assert "does not run: fix exercises/basics.py first" in out


def test_a_typo_fails_only_the_puzzle_whose_code_reads_it_with_the_close_match(kit):
    solved = (ROOT / "reference" / "basics.py").read_text()
    kit.write("exercises/basics.py", solved.replace("jnp.sum(x_ref[...], axis=1",
                                                    "jnp.sum(x_reff[...], axis=1"))
    out = kit.run("exercises/test_basics.py", "-k", "add_one or row_sum").stdout
    text = out.str()
    assert "breaks the rule" not in text
    lines = out.lines
    assert "✓ basics.add_one  solved · +10 points" in lines
    start = next(i for i, line in enumerate(lines) if line.startswith("✗ basics.row_sum"))
    at = lines[start + 1]
    assert at.startswith("  at         exercises/basics.py:")
    assert at.endswith("o_ref[...] += jnp.sum(x_reff[...], axis=1, keepdims=True)")
    caret = lines[start + 2]
    assert caret.index("^") == at.index("x_reff") and caret.strip() == "^" * len("x_reff")
    assert lines[start + 3] == ("  diagnosis  `x_reff` is defined nowhere in this file and "
                                "is no builtin: a typo?")
    assert lines[start + 4].strip() == "Did you mean `x_ref`?"


def test_a_renamed_function_fails_its_puzzle_as_the_learners_not_the_kits(kit):
    solved = (ROOT / "reference" / "basics.py").read_text()
    kit.write("exercises/basics.py", solved.replace("def add_one(x", "def add_onez(x"))
    out = kit.run("exercises/test_basics.py", "-k", "add_one or row_sum").stdout.str()
    assert "kit problem" not in out and "✗ basics.add_one  [" in out
    assert "exercises/basics.py has no `add_one`" in flat(out)
    assert "Did you rename it to `add_onez`?" in flat(out)
    assert "✓ basics.row_sum" in out


WRONG = {"matmul": "k_accumulate_no_reset", "flash": "dense_no_scale",
         "ragged_dot": "k_axis_acc_not_reset", "pipelining": "double_buffer_reads_the_next_slot",
         "splash": "dedup_index_one_based", "linear": "chunked_state_first",
         "norms": "long_rows_no_rescale", "quant": "int4_nibbles_swapped",
         "collectives": "sent_left", "hopper": "first_kernel_rows_not_scaled"}


def test_a_numpy_patch_that_gets_past_the_rule_still_changes_no_verdict(kit):
    """Defence in depth, in a run of every chapter: with the rule switched off (a
    conftest of the copy), the basics file makes NumPy's |x| zero (every comparison
    that computes |yours - expected| with it passes); each other chapter holds a wrong
    kernel, and each still fails on its values."""
    kit.write("conftest.py", "from pytest_pallas_hints import rules\n"
                             "rules.check_source = lambda source: None\n")
    kit.write("exercises/basics.py", "import numpy as np\n"
                                     "setattr(np, 'abs', lambda x: np.zeros(np.shape(x)))\n"
              + (ROOT / "exercises" / "basics.py").read_text())
    from pytest_pallas_hints import jaxcompat

    puzzles = []
    for chapter, mistake in WRONG.items():
        if chapter == "hopper" and jaxcompat.gpu_interpret_missing("kernels"):
            continue   # "cannot be verified" on this JAX, never a verdict
        wrong = (ROOT / "tests" / "mistakes" / chapter / f"{mistake}.py").read_text()
        puzzles.append(wrong.split('PUZZLE = "')[1].split('"')[0])
        kit.write(f"exercises/{chapter}.py",
                  (ROOT / "reference" / f"{chapter}.py").read_text() + "\n" + wrong)
    names = " or ".join(p.split(".")[1] for p in puzzles)
    result = kit.run("exercises", "-k", f"add_one or {names}", "--no-scoreboard",
                     subprocess=True)   # NumPy patched in a process of its own
    out = result.stdout.str()
    assert "✗ basics.add_one" not in out   # a stub: not started
    for puzzle in puzzles:
        assert f"✗ {puzzle}" in out, (puzzle, out)
    assert "solved" not in out and result.ret == 1

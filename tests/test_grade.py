"""The grading script against a simulated GitHub runner: a classroom copy made into a
template repository, a student's clone with one attack each, and grade.py run as the
workflow runs it. Every attack on a copy with nothing solved scores 0 and leaves a
message a teacher can read; an honest solution scores full marks.

Confinement (an unprivileged user) needs root; where the tests do not run as root,
those that need it skip with the reason."""
import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_pallas_hints import catalogue, classroom, grade

ROOT = Path(__file__).resolve().parent.parent
GRADER = ROOT / "pytest_pallas_hints" / "grade.py"
KIT = catalogue.load(ROOT)
BASICS = KIT["basics"].points
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="confining the student's code to "
                               "an unprivileged user needs root")
# A Python the unprivileged user can run (one under /root, as pyenv's, it cannot).
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="session")
def grading_python():
    """A virtual environment the unprivileged user can run, with the kit installed (not
    editable) and its dependencies: what grade.py installs for every submission, made
    once for these tests."""
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("confining the student's code to an unprivileged user needs root")
    if not os.access(SYSTEM_PYTHON, os.X_OK) or subprocess.run(
            [SYSTEM_PYTHON, "-c", "import sys, venv; assert sys.version_info >= (3, 11)"],
            capture_output=True).returncode:
        pytest.skip(f"no Python 3.11+ with venv at {SYSTEM_PYTHON} for the unprivileged user")
    where = Path(tempfile.mkdtemp(prefix="pallas-grading-python-"))
    where.chmod(0o755)
    classroom.make_copy(ROOT, where / "kit")  # installed from a copy, as from a grading tree
    python = grade.install(where / "kit", where / "venv", SYSTEM_PYTHON)
    yield python
    shutil.rmtree(where, ignore_errors=True)


def git(repo, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """The assignment's template repository, as the teacher makes it."""
    path = tmp_path_factory.mktemp("template") / "pallas-course"
    classroom.main([str(path), "--from", str(ROOT)])
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "Pallas exercises")
    return path


@pytest.fixture
def student(template, tmp_path):
    """A student's repository, cloned from the template."""
    repo = tmp_path / "student"
    git(tmp_path, "clone", "-q", str(template), str(repo))
    return repo


class Runner:
    """The GitHub runner's files, and a grading run as the workflow makes it."""

    def __init__(self, tmp_path, template, python):
        self.python = python
        self.output = tmp_path / "github_output"
        self.env_file = tmp_path / "github_env"
        self.output.write_text("")
        self.env_file.write_text("")
        workflow = (template / ".github" / "workflows" / "classroom.yml").read_text()
        self.graded = workflow.split("PALLAS_GRADED: '")[1].split("'")[0]

    def grade(self, repo, *chapters, install=False):
        self.output.write_text("")  # each grading run is a fresh job
        env = {**os.environ, "GITHUB_OUTPUT": str(self.output), "GITHUB_ENV": str(self.env_file),
               "GITHUB_TOKEN": "ghs_secret", "PALLAS_GRADED": self.graded}
        command = [sys.executable, "-I", str(GRADER),
                   *(["--interpreter", SYSTEM_PYTHON] if install else ["--python", self.python]),
                   *(["--chapters", ",".join(chapters)] if chapters else []),
                   "github", "--checkout", str(repo), "--output", str(self.output)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stderr
        lines = [ln for ln in self.output.read_text().splitlines() if ln.startswith("result=")]
        assert len(lines) == 1, self.output.read_text()
        result = json.loads(base64.b64decode(lines[0][len("result="):]))
        return result, done.stdout

    def points(self, result):
        return sum(t["score"] for t in result["tests"])


@pytest.fixture
def runner(tmp_path, template, grading_python):
    return Runner(tmp_path, template, grading_python)


def solve(repo, *chapters):
    for name in chapters:
        shutil.copy(ROOT / "reference" / f"{name}.py", repo / "exercises" / f"{name}.py")


def by_id(result):
    return {t["name"].split(" · ")[0]: t for t in result["tests"]}


def flat(text: str) -> str:
    return " ".join(text.split())


# ------------------------------------------------------------- honest work ---

@root_only
def test_an_honest_solution_scores_full_marks_and_nothing_solved_scores_zero(student, runner):
    result, _ = runner.grade(student, "basics")
    assert runner.points(result) == 0 and result["max_score"] == BASICS
    assert "not started" in by_id(result)["basics.add_one"]["message"]
    solve(student, "basics")
    git(student, "commit", "-qam", "solved")
    result, shown = runner.grade(student, "basics")
    assert runner.points(result) == BASICS == result["max_score"]
    assert result["status"] == "pass"
    assert "::stop-commands::" in shown


def test_a_repository_not_made_from_the_template_scores_zero(tmp_path, runner):
    repo = tmp_path / "elsewhere"
    shutil.copytree(ROOT / "exercises", repo / "exercises")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "not from the template")
    result, shown = runner.grade(repo, "basics")
    assert result["status"] == "error" and runner.points(result) == 0
    assert "not made from the assignment template" in shown


# ----------------------------------------------------------------- attacks ---

def attack(student, files: dict[str, str], message="attack"):
    for relative, text in files.items():
        path = student / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(student, "add", "-A")
    git(student, "commit", "-qm", message)


MARKER = "/tmp/pallas-attack-{}"


def planted(name: str) -> str:
    """Python that leaves a marker file if it ever runs."""
    return f"open({MARKER.format(name)!r}, 'w').write('ran')\n"


@pytest.fixture(autouse=True)
def no_markers():
    for path in Path("/tmp").glob("pallas-attack-*"):
        path.unlink()
    yield


@root_only
def test_stdlib_shadow_conftest_ini_pth_and_sitecustomize_never_run(student, runner):
    attack(student, {
        "tomllib.py": planted("tomllib"),
        "conftest.py": planted("conftest") + "def pytest_collection_modifyitems(items):\n"
                                             "    items.clear()\n",
        "exercises/conftest.py": planted("conftest2"),
        "exercises/__init__.py": planted("init"),
        "pytest.ini": "[pytest]\naddopts = -p no:pallas_hints\n",
        "tox.ini": "[pytest]\naddopts = -p no:pallas_hints\n",
        "setup.cfg": "[tool:pytest]\naddopts = -p no:pallas_hints\n",
        "sitecustomize.py": planted("sitecustomize"),
        "usercustomize.py": planted("usercustomize"),
        "pallas.pth": "import os; " + planted("pth"),
        "exercises/test_free.py": "def test_points():\n    pass\n",
    })
    result, _ = runner.grade(student, "basics")
    assert runner.points(result) == 0 and result["max_score"] == BASICS
    assert not list(Path("/tmp").glob("pallas-attack-*"))


@root_only
def test_a_forged_root_commit_cannot_bring_its_own_tests(student, runner, tmp_path):
    forged = tmp_path / "forged"
    shutil.copytree(student, forged, ignore=shutil.ignore_patterns(".git"))
    (forged / "exercises" / "test_basics.py").write_text(
        "import pytest\n" + "".join(
            f"@pytest.mark.puzzle({p.id!r})\ndef test_{p.name}():\n    pass\n"
            for p in KIT["basics"].puzzles))
    git(forged, "init", "-q", "-b", "main")
    git(forged, "add", "-A")
    git(forged, "commit", "-qm", "template", "--date", "2000-01-01T00:00:00")
    git(student, "fetch", "-q", str(forged), "main:forged")
    git(student, "merge", "-q", "-s", "ours", "--allow-unrelated-histories", "forged",
        "-m", "merge")
    shutil.copy(forged / "exercises" / "test_basics.py", student / "exercises" / "test_basics.py")
    git(student, "commit", "-qam", "restore my tests")
    result, _ = runner.grade(student, "basics")
    assert runner.points(result) == 0


@root_only
def test_a_stale_result_and_an_early_exit_score_zero_with_the_rule_named(student, runner):
    stale = base64.b64encode(json.dumps({"version": 1, "status": "pass", "max_score": BASICS,
                                         "tests": [{"name": p.id, "status": "pass",
                                                    "score": p.points}
                                                   for p in KIT["basics"].puzzles]}).encode())
    attack(student, {"result.b64": stale.decode(), "results/result": stale.decode(),
                     "exercises/basics.py": "import os\nos._exit(0)\n"})
    result, _ = runner.grade(student, "basics")
    assert runner.points(result) == 0
    message = flat(by_id(result)["basics.add_one"]["message"])
    assert "exercises/basics.py:1 breaks the rule for exercise files" in message
    assert "`import os` is not allowed" in message


# One file per attack: the first six are the classes of issue 19, the rest earlier ones.
ATTACKS = [
    ("value-held module", "import numpy as np\nsys = [np][0].lib.utils.sys\n",
     "`np` is a module: use it only as the start of a name"),
    ("submodule walk to sys", "import numpy as np\nsys = np.lib.utils.sys\n",
     "`np.lib` (numpy.lib) is not allowed"),
    ("assignment to an allowed module", "import numpy as np\nnp.allclose = lambda *a: True\n",
     "assigning to or deleting an attribute is not allowed"),
    ("escape attribute", "def g():\n    yield\nframe = g().gi_frame.f_back\n",
     "frame and code introspection is not allowed"),
    ("forbidden builtin", "checks = vars()\n", "`vars` is not allowed"),
    ("class or decorator", "import functools\n@functools.lru_cache\ndef f(x):\n    return x\n",
     "`@functools.lru_cache` is not a decorator"),
    ("pytest hook", "import pytest\n",
     "`import pytest` is not allowed"),
    ("patch the plugin", "from pytest_pallas_hints import gradebook\n",
     "`from pytest_pallas_hints import` is not allowed"),
    ("background writer", "import subprocess\n",
     "`import subprocess`"),
    ("jax.version.os", "import jax\nw = jax.version.os\n", "`jax.version` is not allowed"),
    ("getattr", "x = getattr(print, 'x')\n", "`getattr` is not allowed"),
    ("dunder", "f = (lambda: 0).__globals__\n", "attributes starting with _ are private"),
    ("JAX's kernels", "from jax.experimental.pallas.ops.tpu import matmul\n",
     "JAX's own library of kernels"),
]


@root_only
@pytest.mark.parametrize("first", range(0, len(ATTACKS), len(KIT)),
                         ids=lambda i: ", ".join(a[0] for a in ATTACKS[i:i + len(KIT)]))
def test_code_that_would_reach_the_judge_is_refused_before_it_runs(student, runner, first):
    """Each chapter's file holds one attack: each chapter scores 0, its message naming
    the line and the rule it broke."""
    attacks = dict(zip(KIT, ATTACKS[first:first + len(KIT)]))
    attack(student, {f"exercises/{chapter}.py": code for chapter, (_, code, _) in attacks.items()})
    result, _ = runner.grade(student, *attacks)
    assert runner.points(result) == 0
    tests = by_id(result)
    for chapter, (name, code, words) in attacks.items():
        message = flat(tests[KIT[chapter].puzzles[-1].id]["message"])
        line = next((n for n, text in enumerate(code.splitlines(), 1)
                     if not text.startswith(("import", "def", " "))), 1)
        assert f"exercises/{chapter}.py:{line} breaks the rule" in message, (name, message)
        assert words in message, (name, message)


@root_only
def test_one_chapters_file_never_changes_anothers_grade(student, runner):
    """Each chapter is graded in a process of its own: a basics file that would make every
    comparison pass (were it run) scores 0, and changes nothing for a wrong matmul."""
    attack(student, {"exercises/basics.py": "import numpy as np\nnp.abs = lambda x: 0 * x\n",
                     "exercises/matmul.py": (ROOT / "reference" / "matmul.py").read_text()
                     + (ROOT / "tests" / "mistakes" / "matmul" / "k_accumulate_no_reset.py")
                     .read_text()})
    result, shown = runner.grade(student, "basics", "matmul")
    tests = by_id(result)
    assert sum(tests[p.id]["score"] for p in KIT["basics"].puzzles) == 0
    assert tests["matmul.k_accumulate"]["score"] == 0
    assert tests["matmul.one_block"]["score"] == KIT["matmul"].puzzles[0].points


# ------------------------------------------------------------- confinement ---

PROBE = '''
import json, os, sys
from pathlib import Path

def test_probe():
    report = {"uid": os.geteuid(), "env": sorted(os.environ)}
    for name, path in (("tree", Path(__file__).parent.parent / "exercises" / "x.py"),
                       ("packages", Path(os.__file__).parent / "pallas_x.py"),
                       ("runner", Path(sys.argv[0]))):
        try:
            path.write_text("x")
            report[name] = "written"
        except OSError:
            report[name] = "refused"
    print("::notice title=Autograding report::{\\"totalPoints\\":9,\\"maxPoints\\":9}")
    print("PROBE", json.dumps(report))
    assert False  # a failure shows what the probe printed
'''


@root_only
def test_the_students_code_runs_confined_and_its_output_is_plain_text(tmp_path, grading_python):
    import tempfile

    tree = Path(tempfile.mkdtemp(prefix="pallas-probe-")) / "kit"
    (tree / "exercises").mkdir(parents=True)
    tree.parent.chmod(0o755)
    (tree / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    (tree / "exercises" / "test_probe.py").write_text(PROBE)
    grade._read_only(tree)
    work = tree.parent / "work"
    work.mkdir()
    work.chmod(0o755)
    user = grade.student()
    os.environ["GITHUB_OUTPUT"] = str(tmp_path / "github_output")
    try:
        _, _, output = grade.run_tests(grading_python, tree, work, user, ["probe"])
    finally:
        del os.environ["GITHUB_OUTPUT"]
        grade.remove(user)
    assert "PROBE " in output, output
    report = json.loads(output.split("PROBE ", 1)[1].splitlines()[0])
    assert report["uid"] == user[0] != 0
    assert report["tree"] == report["packages"] == "refused"
    assert not [name for name in report["env"] if name.startswith(("GITHUB", "ACTIONS", "RUNNER"))]
    import io
    from contextlib import redirect_stdout

    shown = io.StringIO()
    with redirect_stdout(shown):
        grade.show(output)
    lines = shown.getvalue().splitlines()
    token = lines[0].split("::stop-commands::")[1]
    assert len(token) == 32 and lines[-1] == f"::{token}::"
    assert any(line.startswith("::notice") for line in lines[1:-1])  # inert inside


@root_only
def test_every_process_of_the_student_ends_before_the_result_is_read():
    user = grade.student()
    sleeper = subprocess.Popen(["sleep", "300"], user=user[0], group=user[1],
                               start_new_session=True)
    grade.remove(user)
    assert sleeper.wait(timeout=10) != 0
    assert subprocess.run(["pgrep", "-u", str(user[0])], capture_output=True).returncode == 1
    assert subprocess.run(["id", user[2]], capture_output=True).returncode != 0


def test_a_result_is_trusted_only_as_far_as_the_template_allows(tmp_path):
    chapters = {"basics": {"order": 1, "puzzles": [("basics.add_one", "A", 10),
                                                   ("basics.tiled", "B", 10)]}}
    forged = {"version": 1, "status": "pass", "max_score": 10_000, "tests": [
        {"name": "basics.add_one · A", "status": "pass", "score": 999},
        {"name": "basics.bonus · free", "status": "pass", "score": 500}]}
    path = tmp_path / "result"
    path.write_text(base64.b64encode(json.dumps(forged).encode()).decode())
    checked = grade.checked_result({"basics": path}, started=0, chapters=chapters,
                                   ran=["basics"], notes=[])
    assert checked["max_score"] == 20
    assert [(t["name"], t["score"]) for t in checked["tests"]] == [
        ("basics.add_one · A", 10), ("basics.tiled · B", 0)]
    stale = grade.checked_result({"basics": path}, started=path.stat().st_mtime + 60,
                                 chapters=chapters, ran=["basics"], notes=[])
    assert stale["status"] == "error" and sum(t["score"] for t in stale["tests"]) == 0


def test_the_workflow_grades_through_the_script_found_by_content():
    text = (ROOT / ".github" / "workflows" / "classroom.yml").read_text()
    for needed in ("- push", "- repository_dispatch", "checks: write", "actions: read",
                   "contents: read", "github.actor != 'github-classroom[bot]'",
                   "fetch-depth: 0", "PALLAS_GRADED: '{}'", 'git cat-file blob "$grader"',
                   "python3 -I", "pallas-grade.py\" github", "--checkout", '--output "$GITHUB_OUTPUT"',
                   "classroom-resources/autograding-grading-reporter@v1",
                   'PALLAS_RESULTS: "${{ steps.pallas.outputs.result }}"', "runners: pallas"):
        assert needed in text, needed
    assert "pip install -e ." not in text and "python -m pytest " not in text


def test_the_classroom_copy_lists_every_graded_file_by_content(template):
    workflow = (template / ".github" / "workflows" / "classroom.yml").read_text()
    listed = json.loads(workflow.split("PALLAS_GRADED: '")[1].split("'")[0])
    tracked = git(template, "ls-files", "-s").splitlines()
    blobs = {line.split("\t")[1]: line.split()[1] for line in tracked}
    assert listed and all(blobs[path] == blob for path, blob in listed.items())
    for needed in ("pytest_pallas_hints/grade.py", "pytest_pallas_hints/plugin.py",
                   "exercises/test_basics.py", "exercises/hints/basics.toml", "pyproject.toml",
                   "conftest.py"):
        assert needed in listed
    assert "exercises/basics.py" not in listed


@root_only
def test_a_build_hook_never_runs_the_kit_is_installed_from_the_grading_tree(student, runner):
    attack(student, {
        "setup.py": planted("setup") + "from setuptools import setup\nsetup()\n",
        "pyproject.toml": "[build-system]\nrequires = []\nbuild-backend = 'hook'\n"
                          "backend-path = ['.']\n",
        "hook.py": planted("backend"),
    })
    result, _ = runner.grade(student, "basics", install=True)
    assert runner.points(result) == 0 and result["max_score"] == BASICS
    assert not list(Path("/tmp").glob("pallas-attack-*"))


@root_only
def test_a_forged_score_printed_by_the_student_is_plain_text(student, runner):
    forged = '::notice title=Autograding report::{"totalPoints":90,"maxPoints":90}'
    attack(student, {"exercises/basics.py": f"print({forged!r})\n"})
    result, shown = runner.grade(student, "basics")
    assert runner.points(result) == 0
    lines = shown.splitlines()
    token = lines[0].split("::stop-commands::")[1]
    after = lines[lines.index(f"::{token}::") + 1:]
    assert not any(line.startswith("::") for line in after)

"""Grading a submission so that the student cannot shape the grade.

    sudo python3 -I grade.py github --checkout DIR --output $GITHUB_OUTPUT
    python3 -I grade.py gradescope --source DIR --submission DIR --results FILE

The student controls everything in their repository: its files, its history,
the code that runs when their exercises are imported. So, one step at a time:

1. A fresh grading tree. GitHub: the template's graded files (tests, hints,
   plugin, configuration, this script), each found by its content, the git blob
   id that ``python -m pytest_pallas_hints.classroom`` wrote into the workflow
   ($PALLAS_GRADED), read from the repository's object store by that id, never
   by walking its history. A repository that lacks one was not made from the
   assignment template and scores 0. Gradescope: the autograder's own source.
2. From the submission, only ``exercises/<chapter>.py`` of the template's
   chapters, copied by name (regular files, at most 1 MB).
3. The kit installed from the grading tree into a fresh virtual environment, so
   no build hook of the student's runs.
4. pytest run as an unprivileged user (when this runs as root), ``python -I``,
   with a clean environment (no runner files, no tokens), the grading tree and
   the installed packages read-only, the progress file in a fresh folder and no
   cache; each chapter in a process of its own, so that one chapter's file can
   never change another chapter's verdict. The rule for exercise files
   (rules.py) is checked before any of the student's code runs; a chapter that
   breaks it scores 0.
5. Every process of that user ended, then the result read from a path made
   fresh for this run, checked against the template's catalogue (each score
   capped at its puzzle's points, the maximum from the template).
6. The result handed over by this trusted process: GitHub's ``result`` step
   output (read by classroom-resources/autograding-grading-reporter), or
   Gradescope's results.json. The student's output is printed inside
   ``::stop-commands::`` so that none of its lines is a workflow command.

Standard library only: it runs before anything is installed.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

STUDENT = "pallas-"  # + a random suffix: a user of its own for every grading run
MAX_EXERCISE_BYTES = 1 << 20
RUN_SECONDS = 25 * 60
GRADED_ENV = "PALLAS_GRADED"


class NotGradable(Exception):
    """The submission cannot be graded at all (0 points, with this message)."""


# ----------------------------------------------------------------- the tree ---

def blob_id(data: bytes) -> str:
    """Git's id for a file's content (``git hash-object``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def tree_from_template(checkout: Path, graded: dict[str, str], tree: Path) -> None:
    """Writes every graded file of the template into ``tree``, read by its blob id."""
    for relative, blob in sorted(graded.items()):
        if Path(relative).is_absolute() or ".." in Path(relative).parts:
            raise NotGradable(f"the workflow's list of graded files names {relative!r}")
        data = _blob(checkout, blob)
        if data is None or blob_id(data) != blob:
            raise NotGradable(
                f"this repository was not made from the assignment template: {relative} "
                f"(content {blob[:12]}) is not in it. Accept the assignment again, or ask "
                "your teacher.")
        target = tree / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _blob(checkout: Path, blob: str) -> bytes | None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull, "HOME": tempfile.gettempdir()}
    found = subprocess.run(["git", "--git-dir", str(checkout / ".git"), "cat-file", "blob", blob],
                           capture_output=True, env=env)
    return found.stdout if found.returncode == 0 else None


def catalogue(tree: Path) -> dict[str, dict]:
    """The template's chapters: name -> {"order", "puzzles": [(id, title, points)]}."""
    chapters = {}
    for path in sorted((tree / "exercises" / "hints").glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        chapters[path.stem] = {
            "order": int(data.get("chapter", {}).get("order", 99)),
            "puzzles": [(f"{path.stem}.{p['name']}", p["title"], int(p["points"]))
                        for p in data.get("puzzle", [])]}
    return dict(sorted(chapters.items(), key=lambda item: (item[1]["order"], item[0])))


def copy_exercises(submitted: Path, tree: Path, chapters) -> list[str]:
    """Copies ``exercises/<chapter>.py`` of each known chapter, by name; returns notes
    on what could not be taken."""
    notes = []
    for name in chapters:
        source = submitted / "exercises" / f"{name}.py"
        if source.is_symlink() or (source.exists() and not source.is_file()):
            notes.append(f"exercises/{name}.py is not a regular file: not graded")
        elif source.is_file() and source.stat().st_size > MAX_EXERCISE_BYTES:
            notes.append(f"exercises/{name}.py is larger than 1 MB: not graded")
        elif source.is_file():
            shutil.copyfile(source, tree / "exercises" / f"{name}.py")
            continue
        else:
            notes.append(f"exercises/{name}.py is missing")
        (tree / "exercises" / f"{name}.py").unlink(missing_ok=True)
    return notes


# ------------------------------------------------------------------ the run ---

def install(tree: Path, where: Path, interpreter: str = sys.executable) -> str:
    """A fresh virtual environment with the kit installed from the grading tree;
    returns its Python. ``interpreter`` must be one the unprivileged user can run."""
    subprocess.run([interpreter, "-m", "venv", str(where)], check=True)
    python = str(where / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    subprocess.run([python, "-m", "pip", "install", "--quiet", str(tree)], check=True, cwd=where,
                   stdout=sys.stderr, env=env)
    return python


def student() -> tuple[int, int, str] | None:
    """A new unprivileged user for one grading run (uid, gid, name); None when this
    does not run as root. Its own user, so that ending its processes ends only
    this run's."""
    if os.geteuid() != 0:
        return None
    import pwd

    name = STUDENT + secrets.token_hex(4)
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                    name], check=True)
    entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid, name


def remove(user) -> None:
    """Ends the user's processes, then the user."""
    if user:
        end_processes(user)
        subprocess.run(["userdel", user[2]], capture_output=True)


def run_tests(python: str, tree: Path, work: Path, user, chapters: list[str],
              seconds: float = RUN_SECONDS) -> tuple[dict[str, Path], str, str]:
    """Runs the graded tests, each chapter in a process of its own (one chapter's file
    can never change another chapter's verdict); returns (the result file of each
    chapter, their kind, the output)."""
    home, state, results = (work / name for name in ("home", "state", "results"))
    for folder in (home, state, results):
        folder.mkdir()
        if user:
            os.chown(folder, user[0], user[1])
        folder.chmod(0o700)
    env = {"PATH": f"{Path(python).parent}:/usr/bin:/bin", "HOME": str(home),
           "TMPDIR": str(home), "LANG": "C.UTF-8", "JAX_PLATFORMS": "cpu",
           "PALLAS_HINTS_STATE": str(state), "PYTHONDONTWRITEBYTECODE": "1"}
    log = work / "output.txt"
    found: dict[str, Path] = {}
    deadline = time.monotonic() + seconds
    with open(log, "wb") as out:
        for name in chapters:
            if not (tree / "exercises" / f"test_{name}.py").exists():
                continue
            found[name] = results / f"result-{name}"
            command = [python, "-I", "-m", "pytest", "-c", str(tree / "pyproject.toml"),
                       "--rootdir", str(tree), "-p", "no:cacheprovider", "-n", "2",
                       "--no-scoreboard", f"--classroom-result={found[name]}",
                       f"exercises/test_{name}.py"]
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise subprocess.TimeoutExpired(command, seconds)
                subprocess.run(command, cwd=tree, env=env, stdout=out,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=left,
                               start_new_session=True,
                               **({"user": user[0], "group": user[1], "extra_groups": []}
                                  if user else {}))
            except subprocess.TimeoutExpired:
                out.write(f"\n(the grading run stopped after {seconds:g} s)\n".encode())
            except PermissionError as error:   # a Python under /root (pyenv), say
                out.write(f"\n(the grading user cannot run {python}: {error}. Grade with "
                          "--interpreter set to a Python every user can read, such as "
                          "setup-python's or /usr/bin/python3)\n".encode())
            end_processes(user)   # nothing of this chapter's run outlives it
    return found, "classroom", log.read_text(encoding="utf-8", errors="replace")


def end_processes(user) -> None:
    """Ends every process of the student user (a background writer included)."""
    if not user:
        return
    for _ in range(50):
        subprocess.run(["pkill", "-KILL", "-u", str(user[0])], capture_output=True)
        if subprocess.run(["pgrep", "-u", str(user[0])], capture_output=True).returncode:
            return
        time.sleep(0.1)


# --------------------------------------------------------------- the result ---

def checked_result(paths: dict[str, Path], started: float, chapters: dict, ran: list[str],
                   notes: list[str]) -> dict:
    """The run's classroom result, trusted only as far as the template allows: each
    chapter's file read for that chapter's puzzles only, each test matched to a template
    puzzle, its score capped at that puzzle's points, the maximum the template's.
    Anything else, or no fresh file: an error, 0 points."""
    puzzles = {pid: (title, points) for name in ran for pid, title, points
               in chapters[name]["puzzles"]}
    maximum = sum(points for _, points in puzzles.values())
    tests, messages = {}, {}
    for name in ran:
        mine = {pid: puzzles[pid] for pid, _, _ in chapters[name]["puzzles"]}
        messages[name] = _read_result(paths.get(name), started, mine, tests)
    for pid, (title, points) in puzzles.items():
        message = messages[pid.split(".")[0]]
        tests.setdefault(pid, {"name": f"{pid} · {title}", "status": "error", "score": 0,
                               "message": message or "its tests did not report",
                               "test_code": "", "filename": "", "line_no": 0, "duration": 0})
    for note in notes:
        chapter = note.split("/")[1].split(".")[0] if note.startswith("exercises/") else ""
        for pid in tests:
            if pid.split(".")[0] == chapter and tests[pid]["status"] != "pass":
                tests[pid]["message"] = f"{note}. {tests[pid]['message'] or ''}".strip()
    ordered = [tests[pid] for pid in puzzles]
    status = ("pass" if ordered and all(t["status"] == "pass" for t in ordered) else
              "error" if any(messages.values()) else "fail")
    return {"version": 1, "status": status, "max_score": maximum, "tests": ordered}


def _read_result(path: Path | None, started: float, puzzles: dict, tests: dict) -> str:
    """Reads one chapter's classroom result into ``tests`` (its own puzzles only);
    returns what went wrong, or ""."""
    try:
        if path is None or not path.is_file() or path.is_symlink() \
                or path.stat().st_mtime < started - 1 or path.stat().st_size >= (4 << 20):
            return "the grading run left no result"
        data = json.loads(base64.b64decode(path.read_text(encoding="ascii").strip()))
        for test in data.get("tests", []):
            pid = str(test.get("name", "")).split(" ")[0]
            if pid in puzzles and pid not in tests:
                title, points = puzzles[pid]
                status = test.get("status") if test.get("status") in (
                    "pass", "fail", "error") else "error"
                tests[pid] = {**{k: test.get(k) for k in ("message", "test_code", "filename",
                                                          "line_no", "duration")},
                              "name": f"{pid} · {title}", "status": status,
                              "score": points if status == "pass" else 0}
        return ""
    except (OSError, ValueError, TypeError, AttributeError):
        return "the grading run left a result that could not be read"


def not_gradable(chapters: dict, why: str) -> dict:
    return {"version": 1, "status": "error",
            "max_score": sum(p for c in chapters.values() for _, _, p in c["puzzles"]),
            "tests": [{"name": f"{pid} · {title}", "status": "error", "score": 0,
                       "message": why, "test_code": "", "filename": "", "line_no": 0,
                       "duration": 0}
                      for c in chapters.values() for pid, title, _ in c["puzzles"]]}


def show(output: str) -> None:
    """Prints the student's output as plain text: no line of it is a workflow command."""
    token = secrets.token_hex(16)
    print(f"::stop-commands::{token}")
    print(output.rstrip())
    print(f"::{token}::", flush=True)


def as_gradescope(result: dict) -> dict:
    return {"score": sum(t["score"] for t in result["tests"]),
            "tests": [{"name": t["name"], "score": t["score"], "max_score": t["max_score"],
                       "status": "passed" if t["status"] == "pass" else "failed",
                       "output": t.get("message") or "solved", "visibility": "visible"}
                      for t in result["tests"]]}


# ---------------------------------------------------------------- commands ---

def grade(tree: Path, submitted: Path, work: Path, *, python: str | None,
          chapters_run: list[str] | None, interpreter: str = sys.executable
          ) -> tuple[dict, str]:
    """Grades ``submitted`` with the trusted kit in ``tree``: (result, student output)."""
    chapters = catalogue(tree)
    ran = [c for c in chapters if not chapters_run or c in chapters_run]
    notes = copy_exercises(submitted, tree, chapters)
    _read_only(tree)
    python = python or install(tree, work / "venv", interpreter)
    user = student()
    started = time.time()
    try:
        paths, _, output = run_tests(python, tree, work, user, ran)
    finally:
        remove(user)
    result = checked_result(paths, started, {c: chapters[c] for c in ran}, ran, notes)
    for test in result["tests"]:  # each test's max, for Gradescope
        test["max_score"] = next(p for c in ran for pid, _, p in chapters[c]["puzzles"]
                                 if test["name"].startswith(pid + " "))
    return result, output


def _read_only(tree: Path) -> None:
    for path in [tree, *tree.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="grade.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", help="run the tests with this Python (its environment "
                                         "has the kit) instead of installing the kit afresh")
    parser.add_argument("--interpreter", default=sys.executable,
                        help="the Python to make the grading environment with (default: "
                             "this one; it must be readable by the unprivileged user)")
    parser.add_argument("--chapters", type=lambda text: text.split(","),
                        help="grade only these chapters (comma-separated)")
    sub = parser.add_subparsers(dest="platform", required=True)
    github = sub.add_parser("github", help="GitHub Classroom (run by the workflow)")
    github.add_argument("--checkout", type=Path, required=True, help="the student's repository")
    github.add_argument("--graded", default=os.environ.get(GRADED_ENV),
                        help=f"JSON path -> blob id of the graded files (default: ${GRADED_ENV})")
    github.add_argument("--output", type=Path, help="append result=<base64> here "
                                                    "($GITHUB_OUTPUT)")
    gradescope = sub.add_parser("gradescope", help="Gradescope (run by run_autograder)")
    gradescope.add_argument("--source", type=Path, required=True)
    gradescope.add_argument("--submission", type=Path, required=True)
    gradescope.add_argument("--results", type=Path, required=True)
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="pallas-grading-"))
    work.chmod(0o755)
    tree = work / "kit"
    tree.mkdir()
    if args.platform == "github":
        try:
            graded = json.loads(args.graded or "null")
            if not isinstance(graded, dict) or not graded:
                raise NotGradable("the workflow lists no graded files: make the assignment's "
                                  "repository with python -m pytest_pallas_hints.classroom")
            tree_from_template(args.checkout, graded, tree)
        except (NotGradable, ValueError) as why:
            result, output = not_gradable(catalogue(tree) if (tree / "exercises").exists()
                                          else {}, str(why)), str(why)
        else:
            result, output = grade(tree, args.checkout, work, python=args.python,
                                   chapters_run=args.chapters, interpreter=args.interpreter)
        show(output)
        encoded = base64.b64encode(json.dumps(result).encode()).decode()
        if args.output:
            with open(args.output, "a", encoding="utf-8") as out:
                out.write(f"result={encoded}\n")
        else:
            print(f"result={encoded}")
    else:
        shutil.copytree(args.source, tree, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache",
                                                      ".pallas_progress.json*", ".venv*"))
        result, output = grade(tree, args.submission, work, python=args.python,
                               chapters_run=args.chapters, interpreter=args.interpreter)
        results = as_gradescope(result)
        results["output"] = output[-20000:]
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    total = sum(t["score"] for t in result["tests"])
    print(f"pallas grade: {total} / {result['max_score']} points ({result['status']})",
          file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

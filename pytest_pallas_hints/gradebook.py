"""The gradebook: per puzzle, the points a run scored, written as GitHub Classroom's
``result`` and Gradescope's ``results.json`` (``grade.py`` is the script that grades a
submission; this is what a run writes).

One entry per puzzle, not per pytest item: a puzzle scores its points when
every one of its tests ran and passed in this run, else 0. Skipped tests
(no TPU here) and xfails never score. The diagnosis is each entry's message,
so the student sees in the grading log what they see in their terminal.

GitHub Classroom: ``classroom-resources/autograding-grading-reporter`` reads a
step output ``result`` holding base64 of ``{"version": 1, "status", "max_score",
"tests": [{"name", "status", "score", "message", "test_code", "filename",
"line_no", "duration"}]}``; ``--classroom-result PATH`` writes that base64.
"""
from __future__ import annotations

import base64
import dataclasses
import json

from . import jaxcompat
from .catalogue import Chapter
from .scoreboard import PuzzleRun


@dataclasses.dataclass
class Graded:
    id: str
    title: str
    number: str          # "1.3": chapter order . puzzle order
    points: int
    score: int
    status: str          # "pass", "fail" or "error"
    message: str
    command: str
    filename: str
    line_no: int
    duration: float


def grade(chapters: dict[str, Chapter], runs: dict[str, PuzzleRun], reports: list,
          broken_files: dict[str, str], message_for, command_for) -> list[Graded]:
    """Per puzzle of every chapter this run touched: its status, score and message.

    broken_files: chapter name -> why its test file could not be collected.
    message_for(run) -> the rendered diagnosis of a failing puzzle.
    """
    first_report: dict = {}
    duration: dict[str, float] = {}
    unverifiable: dict[str, str] = {}   # puzzle -> a feature this JAX lacks for it
    for report in reports:
        first_report.setdefault(report.puzzle, report)
        if report.unverifiable:
            unverifiable.setdefault(report.puzzle, report.unverifiable)
        duration[report.puzzle] = duration.get(report.puzzle, 0.0) + report.duration
    present = {pid.split(".")[0] for pid in first_report} | set(broken_files)
    graded = []
    for c_index, chapter in enumerate(chapters.values(), start=1):
        if chapter.name not in present:
            continue
        for p_index, puzzle in enumerate(chapter.puzzles, start=1):
            run = runs.get(puzzle.id)
            first = first_report.get(puzzle.id)
            where = (first.location if first else ()) or (f"exercises/test_{chapter.name}.py", 0)
            if chapter.name in broken_files:
                status, message = "error", broken_files[chapter.name]
            elif run is not None and run.status == "solved":
                status, message = "pass", ""
            elif run is not None and run.errored:
                status, message = "error", message_for(run)
            elif run is not None and run.failed:
                status, message = "fail", message_for(run)
            elif puzzle.id in unverifiable:
                status = "fail"
                feature = unverifiable[puzzle.id]
                message = jaxcompat.verdict(feature) + (
                    " (grade it on the hardware)" if jaxcompat.unfaithful(feature)
                    else " (grade it with a newer JAX)")
            else:
                status = "fail"
                message = ("its tests did not run" if run is None else
                           "not every test of this puzzle ran and passed")
            graded.append(Graded(
                id=puzzle.id, title=puzzle.title, number=f"{c_index}.{p_index}", points=puzzle.points,
                score=puzzle.points if status == "pass" else 0, status=status,
                message=message, command=command_for(puzzle), filename=where[0],
                line_no=int(where[1]) + 1, duration=round(duration.get(puzzle.id, 0.0), 3)))
    return graded


def classroom_result(graded: list[Graded], run_completed: bool) -> str:
    """The base64 ``result`` GitHub Classroom's grading reporter decodes."""
    if not run_completed:
        status = "error"
    else:
        status = "pass" if graded and all(g.status == "pass" for g in graded) else "fail"
    data = {
        "version": 1,
        "status": status,
        "max_score": sum(g.points for g in graded),
        "tests": [{"name": f"{g.id} · {g.title}", "status": g.status,
                   "score": g.score, "message": g.message, "test_code": g.command,
                   "filename": g.filename, "line_no": g.line_no, "duration": g.duration}
                  for g in graded],
    }
    return base64.b64encode(json.dumps(data).encode()).decode()


def nothing_ran_classroom(chapters: dict[str, Chapter]) -> str:
    """The result before (or without) a finished run: an error, every puzzle 0."""
    data = {"version": 1, "status": "error",
            "max_score": sum(c.points for c in chapters.values()),
            "tests": [{"name": f"{p.id} · {p.title}", "status": "error", "score": 0,
                       "message": "the grading run did not finish", "test_code": "",
                       "filename": "", "line_no": 0, "duration": 0}
                      for c in chapters.values() for p in c.puzzles]}
    return base64.b64encode(json.dumps(data).encode()).decode()


def nothing_ran_gradescope(chapters: dict[str, Chapter]) -> str:
    return json.dumps({"score": 0, "output": "the grading run did not finish", "tests": [
        {"name": f"{p.id} · {p.title}", "score": 0, "max_score": p.points,
         "status": "failed", "output": "the grading run did not finish",
         "visibility": "visible"} for c in chapters.values() for p in c.puzzles]}, indent=1)


def gradescope_results(graded: list[Graded], execution_time: float, output: str) -> dict:
    """Gradescope's results.json: the total and one test per puzzle."""
    return {
        "score": sum(g.score for g in graded),
        "execution_time": round(execution_time, 2),
        "output": output,
        "tests": [{"name": f"{g.id} · {g.title}", "number": g.number, "score": g.score,
                   "max_score": g.points, "status": "passed" if g.status == "pass" else "failed",
                   "output": g.message or "solved", "visibility": "visible"}
                  for g in graded],
    }


# ------------------------------------------------------- the files a run writes ---

def start_files(classroom: str | None, gradescope: str | None, chapters) -> None:
    """A result exists from the start: an error with 0 points, replaced at the end of
    the run; a run that dies on the way leaves it (never a stale file)."""
    from pathlib import Path

    for path, write in ((classroom, nothing_ran_classroom), (gradescope, nothing_ran_gradescope)):
        if path:
            Path(path).unlink(missing_ok=True)
            Path(path).write_text(write(chapters) + "\n")


def finish_files(classroom: str | None, gradescope: str | None, graded: list[Graded], *,
                 completed: bool, seconds: float, scoreboard_text: str) -> None:
    """The grading results of a finished run, over the ones written at its start."""
    from pathlib import Path

    if classroom:
        Path(classroom).write_text(classroom_result(graded, completed) + "\n")
    if gradescope:
        results = gradescope_results(graded, seconds, scoreboard_text)
        Path(gradescope).write_text(json.dumps(results, indent=1) + "\n")

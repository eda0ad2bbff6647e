"""The notebook path: notebooks/start.ipynb runs top to bottom on a CPU, in a copy of
the kit, and its cells print what the terminal prints."""
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_notebook_runs_top_to_bottom_and_shows_the_terminals_output(kit):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    kit.only("basics", "matmul")
    shutil.copytree(ROOT / "notebooks", kit.path / "notebooks")
    notebook = nbformat.read(kit.path / "notebooks" / "start.ipynb", as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(kit.path / "notebooks")}}
                            ).execute()   # raises CellExecutionError if a cell errors
    printed = ["".join(output.get("text", "")) for cell in notebook.cells
               if cell.cell_type == "code" for output in cell.get("outputs", [])]
    text = "\n".join(printed)
    assert f"the kit is in {kit.path}" in text
    assert "basics.add_one" in text and "not started" in text
    assert "Pallas exercises · 0 of 15 puzzles" in text
    assert "hint 1 of 3 · the idea" in text

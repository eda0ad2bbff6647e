"""Repo-level wiring only: lets `pytest` and `python -m pytest` work from a fresh
clone before `pip install -e .` has registered the plugin (the installed entry
point wins once it exists)."""
import importlib.metadata
import sys
from pathlib import Path

if not any(entry.name == "pallas_hints"
           for entry in importlib.metadata.entry_points(group="pytest11")):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    pytest_plugins = ["pytest_pallas_hints.plugin"]

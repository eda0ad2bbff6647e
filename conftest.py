"""Repo-level wiring only: lets `pytest` work from a fresh clone before
`pip install -e .` has registered the plugin (the installed entry point wins)."""
import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("pytest_pallas_hints") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    pytest_plugins = ["pytest_pallas_hints.plugin"]

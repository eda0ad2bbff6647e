"""pytest-pallas-hints: the pytest plugin and test helpers of the Pallas exercises.

Test files use::

    from pytest_pallas_hints import Structure, chapter, check, lowers_for_tpu, run

Imports are lazy so that loading the plugin (every pytest start, even
``pytest --help``) does not import JAX or NumPy.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "cdiv": "lessons.common",
    "chapter": "chapters",
    "check": "checking",
    "check_blocks": "checking",
    "check_rejects": "checking",
    "check_structure": "checking",
    "check_overlap": "checking",
    "check_products_on_the_mxu": "checking",
    "check_traffic": "checking",
    "check_vmem": "checking",
    "check_work": "checking",
    "f64": "lessons.common",
    "fail": "checking",
    "lowers_for_tpu": "checking",
    "measure": "checking",
    "run": "checking",
    "run_jax": "checking",
    "tpu_sized": "checking",
    "KitError": "checking",
    "Mismatch": "checking",
    "Rng": "checking",
    "Structure": "structure",
    "moved_bytes": "checking",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

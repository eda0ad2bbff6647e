"""NumPy as it was when the plugin was imported, for the code that judges.

An exercise file runs in the process whose checks judge it. The rule for
exercise files (rules.py) refuses any write to a library's attribute; should
one ever get past it, the kit still compares values, counts bytes and draws
inputs with the functions NumPy had before any exercise file ran: ``np`` here
is a copy of NumPy's namespace (and of ``numpy.random``'s), taken once.
"""
import types

import numpy
import numpy.random


def _snapshot(module) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{name: value for name, value in vars(module).items()
                                    if not name.startswith("__")})


np = _snapshot(numpy)
np.random = _snapshot(numpy.random)

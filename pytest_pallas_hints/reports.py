"""What one test of a puzzle reports: the record behind every line about it.

The plugin makes one ``PuzzleReport`` per test phase that counts (plugin.py); the
terminal renders it (terminal.py), the scoreboard tallies it (scoreboard.py), the
gradebook scores it (gradebook.py), ``--cost`` and ``--show`` draw what it measured.
Under xdist it is made on a worker and read on the controller: ``to_dict`` /
``from_dict`` carry it across (plugin.py's xdist hooks), as pytest's own reports cross.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class PuzzleReport:
    puzzle: str                     # the puzzle's id, "basics.add_one"
    nodeid: str
    test: str                       # the test function's name, for -k
    outcome: str                    # "passed", "failed" or "skipped"
    when: str                       # "setup", "call" or "teardown"
    of: int = 0                     # tests the puzzle has that can run here
    config: str = ""                # the parametrize id, "M=8 D=128"
    location: tuple = ()            # (file, line) of the test
    duration: float = 0.0
    seed: int | None = None         # the session seed, where the test draws inputs
    needs: str | None = None        # skipped for want of this hardware ("tpu", "gpu")
    unverifiable: str | None = None  # skipped: a feature this JAX cannot verify
    findings: list = dataclasses.field(default_factory=list)   # diagnose.Finding, first
    #                                 the most specific; empty unless it failed
    dtype: str | None = None        # the expected output's dtype, where compared
    output: str | None = None       # the output compared, when not "output" ("dx")
    printed: list = dataclasses.field(default_factory=list)    # the code's last printed lines
    kit_error: bool = False         # failed in the kit's own machinery
    cost: list = dataclasses.field(default_factory=list)       # cost.KernelCost per kernel
    show: list = dataclasses.field(default_factory=list)       # show.GridWalk per kernel
    not_projected: str = ""         # a tpu configuration --cost could not project: why

    @property
    def kind(self) -> str | None:
        """The first finding's kind ("not_started", "values"...), if it failed."""
        return self.findings[0].kind if self.findings else None

    def to_dict(self) -> dict:
        data = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        data.update(findings=[f.to_dict() for f in self.findings],
                    cost=[c.to_dict() for c in self.cost], show=[w.to_dict() for w in self.show],
                    location=list(self.location), printed=list(self.printed))
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "PuzzleReport":
        from .cost import KernelCost
        from .diagnose import Finding
        from .show import GridWalk

        return cls(**{**data, "findings": [Finding.from_dict(f) for f in data["findings"]],
                      "cost": [KernelCost.from_dict(c) for c in data["cost"]],
                      "show": [GridWalk.from_dict(w) for w in data["show"]],
                      "location": tuple(data["location"])})

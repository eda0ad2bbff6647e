"""``pallas <command>`` (also ``python -m pytest_pallas_hints <command>``).

    pallas watch [CHAPTER] [PUZZLE]    re-check the puzzle you work on at every save
"""
from __future__ import annotations

import sys

COMMANDS = {"watch": "re-check the puzzle you work on at every save"}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        known = "\n".join(f"  {name:<8}{what}" for name, what in COMMANDS.items())
        print(f"usage: pallas <command> [options]\n\ncommands:\n{known}",
              file=sys.stdout if argv[:1] in (["-h"], ["--help"]) else sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    from . import watch

    return watch.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())

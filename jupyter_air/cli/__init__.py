"""``air``: submit and inspect jobs from a shell.

``air run -f workload.yaml``, ``air list``, ``air get ID``, ``air logs ID``, ``air cancel ID``,
``air permissions ID``, ``air profile ID``, ``air sweep``, ``air exporter``, ``air usage``.
The caller is the OS user (with its OS groups): a store on a shared disk may hold others'
jobs, shown and touched only as their permissions allow.
Exit status 0 on success; otherwise non-zero with a one-line reason on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from . import exporter, jobs, logs, profile, run, sweep, usage
from .common import CliError, _run_link

__all__ = ["CliError", "_run_link", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser(argv).parse_args(argv)
    try:
        return int(args.func(args))
    except CliError as err:
        print(f"air: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``air get ID | head -3``): end quietly, as git and grep
        # do; stdout points at /dev/null so that the exit's flush fails no more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="air", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run.add_commands(sub)
    jobs.add_commands(sub)
    logs.add_commands(sub)
    profile.add_commands(sub)
    sweep.add_commands(sub)
    exporter.add_commands(sub)
    usage.add_commands(sub)

    # air schedule ..., air scheduler status|stop: their parsers (cron, pydantic models)
    # load only for them or the list of commands, not for every other command.
    if not argv or argv[0] in ("schedule", "scheduler", "-h", "--help"):
        from ..schedules.cli import add_commands

        add_commands(sub)
    return parser

"""``%%air_distributed``: run a cell on N fresh rank processes as a job."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import (
    MagicHelpFormatter,
    argument,
    kwds,
    magic_arguments,
    parse_argstring,
)
from traitlets import Unicode

from ..jobs.backends.settings import aliases
from .capture import UnpicklableName, cell_payload
from .job_options import options_from, whole_job_options
from .launch import cell_run_name, run
from .options import OptionError

#: Where a refused option points the user.
SEE_HELP = "see %%air_distributed? for the options"


class CellMagicHelpFormatter(MagicHelpFormatter):
    """IPython's magic help, with a cell magic's ``%%`` and a plain ``usage:`` line
    (IPython's own starts with ``::`` and one ``%``, the line magic's spelling)."""

    def add_usage(self, usage: Any, actions: Any, groups: Any, prefix: Any = None) -> None:
        super().add_usage(usage, actions, groups, "usage: %%")


@magics_class
class DistributedMagics(Magics):
    """The cell magic; ``AirMagics`` adds the backends' settings as its configuration."""

    @magic_arguments()
    @kwds(formatter_class=CellMagicHelpFormatter)
    @whole_job_options()
    @argument(
        "--output-ranks",
        default="all",
        help="Whose output streams into the cell: all, 0 or none (the logs keep everything).",
    )
    @argument("--timeout", type=float, default=None, help="Seconds before the job is stopped.")
    @argument(
        "--background",
        action="store_true",
        help="Submit and return at once; the job keeps going and writes to its logs.",
    )
    @argument(
        "--out",
        action="append",
        default=[],
        metavar="NAME",
        help="Bring NAME back from rank 0 into the notebook (repeatable).",
    )
    @argument(
        "--debug-rank",
        type=int,
        default=0,
        metavar="N",
        help=(
            "The rank whose breakpoint() opens a pdb prompt in the cell (default 0); the "
            "other ranks' breakpoint() is skipped with one line."
        ),
    )
    @argument(
        "--session",
        action="store_true",
        help=(
            "Run the cell on the warm ranks of %%air_session start (their names stay "
            "between cells); only --out, --output-ranks and --debug-rank apply."
        ),
    )
    @cell_magic
    def air_distributed(self, line: str, cell: str) -> Any:
        """Run the cell on N worker processes with the torchrun environment, as one job
        with one MLflow run; the value of rank 0's last expression is the result.

        Example:

            %%air_distributed -n 2
            import os, torch.distributed as dist
            dist.init_process_group("gloo")
            print("hello from rank", dist.get_rank(), "of", os.environ["WORLD_SIZE"])
            dist.get_world_size()
        """
        try:
            args = parse_argstring(self.air_distributed, line)
        except UsageError as err:  # argparse's own message names the option
            raise UsageError(f"{err}; {SEE_HELP}") from None
        if args.session:
            from .session_magic import run_session_cell

            assert self.shell is not None
            _only_session_options(line)
            user_ns = self.shell.user_ns
            return run_session_cell(
                cell, list(args.out), args.output_ranks, user_ns, args.debug_rank
            )
        try:
            options = options_from(args)
            submission = options.validate()
            assert self.shell is not None
            user_ns = self.shell.user_ns
            payload = cell_payload(cell, user_ns, options.out)
            return run(payload, options, submission, cell, user_ns, cell_run_name())
        except (OptionError, UnpicklableName, SyntaxError) as err:
            raise UsageError(f"{err}; {SEE_HELP}") from None


def backend_traits() -> dict[str, Unicode[str | None, str | bytes | None]]:
    """``c.AirMagics.<field>`` for each backend's one-setting alias (the Ray backend's
    ``ray_address``): the kernel's value of that setting for a call that names none.
    Declared by the backend with its alias, so that no backend is named here."""
    return {
        alias.field: Unicode(
            None,
            allow_none=True,
            help=f"This kernel's {alias.flag}, for a call without one: {alias.help}",
        ).tag(config=True)
        for _, alias in aliases()
        if alias.setting is not None
    }


#: ``%%air_distributed``, configured as ``c.AirMagics`` (IPython's configuration by class name).
AirMagics = type(
    "AirMagics",
    (DistributedMagics,),
    {"__module__": __name__, "__doc__": DistributedMagics.__doc__, **backend_traits()},
)


def _only_session_options(line: str) -> None:
    """A session's ranks, environment and run were chosen by ``%air_session start``."""
    allowed = {"--session", "--out", "--output-ranks", "--debug-rank"}
    for word in line.split():
        flag = word.split("=", 1)[0]
        if flag.startswith("-") and flag not in allowed:
            raise UsageError(
                f"{flag} does not apply to a --session cell (give it to %air_session start); "
                f"{SEE_HELP}"
            )

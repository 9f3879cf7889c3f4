"""``%air_session start|status|stop|restart`` and the cells of ``%%air_distributed --session``."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from ..jobs.sessions.host import SessionEnded
from .capture import UnpicklableName, cell_payload
from .display import link_parts
from .job_options import options_from, whole_job_options
from .options import OptionError
from .session_status import describe, shape
from .warm_session import NoSession, WarmSession

SEE_HELP = "see %air_session? for the options"


def run_session_cell(
    cell: str, out: list[str], output_ranks: str, user_ns: dict[str, Any], debug_rank: int = 0
) -> Any:
    """What ``%%air_distributed --session`` does: the cell on the warm ranks (``debug_rank``:
    the one whose ``breakpoint()`` stops)."""
    try:
        session = WarmSession.running()
        payload = cell_payload(cell, user_ns, out).dumps()
    except (NoSession, UnpicklableName, SyntaxError) as err:
        raise UsageError(str(err)) from None
    return session.run_cell(payload, cell, output_ranks, user_ns, debug_rank=debug_rank)


@magics_class
class AirSessionMagics(Magics):
    @magic_arguments()
    @argument(
        "action",
        choices=["start", "status", "stop", "restart"],
        help="What to do; restart: stop the session if it still runs, and start a new one "
        "with the options %%air_session start was given.",
    )
    @whole_job_options(
        "nproc_per_node",
        "nnodes",
        "backend",
        "backend_opt",
        "env",
        "experiment",
        "run_name",
        "oversubscribe",
        "mig",
        "share",
        "tracking",
    )
    @argument(
        "--idle-timeout",
        type=float,
        default=30.0,
        metavar="MINUTES",
        help="Stop the session after this many minutes without a cell (0: never).",
    )
    @line_magic
    def air_session(self, line: str) -> None:
        """Warm ranks kept between cells: start them once, then run cells on them with
        ``%%air_distributed --session``; each rank keeps its names (models, the process
        group) until ``%air_session stop``, the idle timeout, or the kernel's end.
        ``%air_session restart`` starts the session again, with the same options, once
        it ended (or, if it still runs, after stopping it): new ranks, no names kept.

        Examples:

            %air_session start -n 2
            %air_session start --backend ray --nnodes 2 -n 1
            %air_session start -n 2 --tracking deferred
            %air_session restart
        """
        current = WarmSession.current
        try:
            args = parse_argstring(self.air_session, line)
        except UsageError as err:
            raise UsageError(f"{err}; {SEE_HELP}") from None
        if args.action == "status":
            print(describe(current) if current is not None else "no session")
        elif args.action == "restart":
            if current is None:
                raise UsageError("no session to restart: start one with %air_session start -n N")
            if line.split() != ["restart"]:
                raise UsageError(
                    "%air_session restart takes no options: it starts the session again with "
                    "those of its %air_session start (to change them: stop, then start)"
                )
            old = current.job_id
            announce(_started(current.restarted), f" (restarted; job {old} ended)")
        elif args.action == "stop":
            if current is None or current.session.ended is not None:
                print("no session is running")
                return
            current.stop()
            print(describe(current))
        else:
            if current is not None and current.session.ended is None:
                raise UsageError(
                    f"a session is running (job {current.job_id}): %air_session stop first"
                )
            try:
                options = options_from(args)
            except OptionError as err:
                raise UsageError(f"{err}; {SEE_HELP}") from None
            announce(_started(lambda: WarmSession(options, args.idle_timeout)))


def _started(start: Callable[[], WarmSession]) -> WarmSession:
    """The kernel's session from now on, once ``start`` made it; what went wrong, said
    as a usage error (the session before, if any, stays the kernel's)."""
    try:
        session = WarmSession.current = start()
    except OptionError as err:
        raise UsageError(f"{err}; {SEE_HELP}") from None
    except SessionEnded as err:
        raise UsageError(f"the session could not start: {err}") from None
    return session


def announce(session: WarmSession, note: str = "") -> None:
    """The session's job and its run's links, as a cell's header says them: links where a
    Jupyter server serves the pages, else the run's name and the commands that open it."""
    links = session.links(session.run_id)
    parts_html, parts_text = link_parts(session.job_id, session.run_name, links)
    ready = f"{shape(session)} ready{note}"
    job_html = f"<b>Session job</b> <code>{html.escape(session.job_id)}</code>"
    head_html = " · ".join([job_html, html.escape(ready), *parts_html])
    head_text = " | ".join([f"Session job {session.job_id}: {ready}", *parts_text])
    usage_html = (
        "Run cells on them with <code>%%air_distributed --session</code>; "
        "<code>%air_session stop</code> ends it."
    )
    usage = "Run cells on them with %%air_distributed --session; %air_session stop ends it."
    bundle = {
        "text/plain": f"{head_text}\n{usage}",
        "text/html": f'<div class="jp-air-SessionHeader">{head_html}</div><div>{usage_html}</div>',
    }
    display(bundle, raw=True)

"""``%%air_sweep``: a hyperparameter search whose every trial runs the cell as a job.

::

    %%air_sweep -n 2 --trials 12 --parallel 2 --minimize val_loss \\
        --space 'lr: loguniform(1e-4, 1e-1)' --space 'layers: int(1, 4)'
    from jupyter_air import params, log_metrics
    p = params()
    ...
    log_metrics({"val_loss": val_loss}, step=epoch)

The job options are ``%%air_distributed``'s (``job_options``), for each trial; the rest
say what to search. A bad option is refused in one line naming its flag, before
anything starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, kwds, magic_arguments, parse_argstring

from ..jobs.service import Refused
from ..jobs.workload_file import WorkloadError
from ..notify.targets import BadTarget, Target, parse_all
from ..sweeps.space_text import FORMS, BadSpace, parse_line
from ..sweeps.sweep_file import SweepFile
from .capture import UnpicklableName, cell_payload
from .job_options import options_from, whole_job_options
from .launch import cell_run_name
from .magics import CellMagicHelpFormatter
from .options import OptionError, option_error
from .session import notebook_path

if TYPE_CHECKING:  # imported at the magic's first use: they import Optuna, and it tqdm,
    # which imports ipywidgets in a kernel (%load_ext stays light)
    from .sweep_launch import Search

#: Where a refused option points the user.
SEE_HELP = "see %%air_sweep? for the options"

#: The job options a trial takes (the rest belong to one followed call).
TRIAL_OPTIONS = (
    "nproc_per_node",
    "nnodes",
    "backend",
    "backend_opt",
    "experiment",
    "run_name",
    "max_retries",
    "env",
    "oversubscribe",
    "share",
    "guards",
)

#: The sweep's fields as the magic's flags name them.
FLAGS = {
    "trials": "--trials",
    "parallel": "--parallel",
    "sampler": "--sampler",
    "pruner": "--pruner",
    "seed": "--seed",
    "objective": "--minimize/--maximize",
    "space": "--space",
    "experiment_name": "--experiment",
    "storage": "--storage",
}


def flag_of(dotted: str) -> str:
    """A sweep field's flag: ``space.lr`` is ``--space lr``, ``pruner.name`` ``--pruner``."""
    head, _, rest = dotted.partition(".")
    if head == "space" and rest:
        return "--space " + rest.replace(".", " ")
    return FLAGS.get(head, dotted)


def search_from(args: Any) -> Search:
    """The search the flags ask for; ``UsageError`` naming the flag otherwise."""
    if (args.minimize is None) == (args.maximize is None):
        raise UsageError(f"give --minimize METRIC or --maximize METRIC (one); {SEE_HELP}")
    objective = (
        {"minimize": args.minimize} if args.minimize is not None else {"maximize": args.maximize}
    )
    if not args.space:
        raise UsageError(
            f"--space 'NAME: FORM' is needed, e.g. --space 'lr: loguniform(1e-4, 1e-1)'; "
            f"the forms: {FORMS}; {SEE_HELP}"
        )
    found: dict[str, Any] = {}
    for text in args.space:
        try:
            name, param = parse_line(text)
        except BadSpace as err:
            raise UsageError(f"--space {err}; {SEE_HELP}") from None
        if name in found:
            raise UsageError(f"--space {name}: given twice; {SEE_HELP}")
        found[name] = param
    if args.trials is None and args.sampler != "grid":
        raise UsageError(f"--trials N is needed: how many trials in all; {SEE_HELP}")
    from .sweep_launch import Search

    return Search(
        space=found,
        objective=objective,
        trials=10_000 if args.trials is None else args.trials,  # a grid: its size
        parallel=args.parallel,
        sampler=args.sampler,
        pruner=args.pruner,
        seed=args.seed,
        notify=_targets(args.told or []),
        storage=args.storage,
    )


@magics_class
class AirSweepMagics(Magics):
    @magic_arguments()
    @kwds(formatter_class=CellMagicHelpFormatter)
    @whole_job_options(*TRIAL_OPTIONS)
    @argument(
        "--space",
        action="append",
        default=[],
        metavar="'NAME: FORM'",
        help=f"A parameter and its range (repeatable); the forms: {FORMS}.",
    )
    @argument("--minimize", metavar="METRIC", help="The metric to minimize (log_metrics).")
    @argument("--maximize", metavar="METRIC", help="The metric to maximize (log_metrics).")
    @argument(
        "--trials",
        type=int,
        default=None,
        help="How many trials in all (with --sampler grid: default and at most its size).",
    )
    @argument("--parallel", type=int, default=1, help="Trials at once (default 1).")
    @argument("--sampler", default="tpe", help="tpe (default), random or grid.")
    @argument(
        "--pruner",
        default="none",
        help="Stop weak trials early: none (default), median, hyperband.",
    )
    @argument(
        "--seed", type=int, default=None, help="The sampler's seed, for a search that repeats."
    )
    @argument(
        "--storage",
        metavar="URL",
        default=None,
        help="Keep the study at this Optuna RDB URL (sqlite:///PATH, postgresql://...) "
        "instead of AIR_HOME's own store.",
    )
    @argument(
        "--notify",
        dest="told",  # the sweep's end; not an option of each trial's job (options_from)
        action="append",
        default=None,
        metavar="TARGET",
        help="Tell of the sweep's end, with its best trial (repeatable): jupyterlab, "
        "email:ADDRESS or webhook:URL.",
    )
    @argument(
        "--new",
        action="store_true",
        help="Start another sweep, even where this cell's sweep runs or completed.",
    )
    @cell_magic
    def air_sweep(self, line: str, cell: str) -> Any:
        """Search hyperparameters: every trial runs the cell as one job (with the job
        options, as ``%%air_distributed`` would), its parameters in
        ``jupyter_air.params()``, its objective a metric it logs. The sweep runs in a
        process of its own: the cell shows its trials as they go and returns the best
        parameters; Stop stops the sweep; running the cell again follows it (after a
        kernel restart too) or shows its result.

        Example:

            %%air_sweep --trials 12 --parallel 2 --minimize val_loss --space 'layers: int(1, 4)'
            from jupyter_air import params, log_metrics
            p = params()
            log_metrics({"val_loss": (p["lr"] - 0.01) ** 2 + p["layers"]})
        """
        from ..sweeps.store import Code
        from .sweep_launch import experiment_name, start_or_follow, sweep_key, sweep_spec

        args, search = parsed(line)
        assert self.shell is not None
        user_ns = self.shell.user_ns
        try:
            options = options_from(args)
            submission = options.validate()
            cell_payload(cell, user_ns, [])  # a syntax error, before anything starts
            run_name = options.run_name or cell_run_name()

            def make_spec(tracking_uri: str) -> SweepFile:
                from ..identity import mlflow_user

                experiment = experiment_name(options.experiment, mlflow_user(), tracking_uri)
                spec = sweep_spec(
                    search,
                    submission,
                    experiment=experiment,
                    run_name=run_name,
                    label="%%air_sweep",
                    name=flag_of,
                )
                return spec

            return start_or_follow(
                make_spec,
                lambda: cell_payload(cell, user_ns, []).dumps(),
                Code(source=cell),
                sweep_key(f"{_without_new(line)}\n{cell}", notebook_path()),
                new=args.new,
                notify=search.notify,
            )
        except (OptionError, UnpicklableName, SyntaxError, WorkloadError) as err:
            raise UsageError(f"{err}; {SEE_HELP}") from None
        except Refused as err:
            if err.field in ("parallel", "notify", "storage"):
                said = f"--{err.field}: {err}"
            else:
                said = str(option_error(err))
            raise UsageError(f"{said}; {SEE_HELP}") from None


def _targets(given: list[str]) -> tuple[Target, ...]:
    try:
        return parse_all(given)
    except BadTarget as err:
        raise UsageError(f"--notify: {err}; {SEE_HELP}") from None


def parsed(line: str) -> tuple[Any, Search]:
    """The magic's line: its arguments and the search they ask for, or ``UsageError``
    naming the flag."""
    try:
        args = parse_argstring(AirSweepMagics.air_sweep, line)
    except UsageError as err:  # argparse's own message names the option
        raise UsageError(f"{err}; {SEE_HELP}") from None
    return args, search_from(args)


def _without_new(line: str) -> str:
    """The magic's line as its sweep's key reads it: ``--new`` starts another sweep of
    the same cell, which the cell without it follows next time."""
    return " ".join(word for word in line.split() if word != "--new")

"""Run by Python at the start of every jupyter_air rank (see ``jobs.env``): answers for
its flight recorder (``jobs.node.flight_recorder``, unless ``AIR_FLIGHT_RECORDER=0``),
marks the HF Trainer's and Lightning's steps (``jupyter_air.perf.hooks``, unless
``AIR_PERF=0``), hooks them for the job's guards (``jupyter_air.jobs.guard_hook``)
and, in an attempt that may resume, resumes them (``jupyter_air.jobs.autoresume``);
then runs the ``sitecustomize`` this one hides, if any, once. This folder leaves
``PYTHONPATH``: a process the rank starts (a trial, a tool) is not the rank. A failure
here never stops the rank; an interpreter without jupyter_air (a workload's own Python)
is left as it is."""

import importlib.machinery
import importlib.util
import os
import sys


def _leave_path() -> None:
    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    parts = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    kept = [p for p in parts if p and os.path.realpath(p) != here]
    if kept:
        os.environ["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        os.environ.pop("PYTHONPATH", None)


def _install() -> None:
    try:
        from jupyter_air.jobs.node import flight_recorder
        from jupyter_air.perf import hooks
    except ImportError:
        return
    try:  # read when the job hangs (AIR_FLIGHT_RECORDER), whatever AIR_PERF says
        flight_recorder.start()
    except Exception as err:
        print(f"[air] the flight recorder is not read: {err!r}", file=sys.stderr, flush=True)
    try:
        hooks.install()
    except Exception as err:  # the rank runs, its steps unmarked
        print(f"[air] step marks are off: {err!r}", file=sys.stderr, flush=True)
    if os.environ.get("AIR_GUARDS"):  # the job has guards (``jobs.guard_hook``)
        try:
            from jupyter_air.jobs import guard_hook

            guard_hook.install()
        except Exception as err:  # the rank runs; the trainers' metrics go unguarded
            print(f"[air] the job's guards are off here: {err!r}", file=sys.stderr, flush=True)
    # Only a retry or a resumed job may resume (``autoresume.wanted`` says which):
    # a first attempt does not import what resuming needs.
    if not (os.environ.get("AIR_RESUME_FROM") or os.environ.get("AIR_ATTEMPT", "1") != "1"):
        return
    try:
        from jupyter_air.jobs import autoresume

        if autoresume.wanted(dict(os.environ)):
            autoresume.install()
    except Exception as err:  # the rank runs, without resuming by itself
        print(f"[air] resuming by itself is off: {err!r}", file=sys.stderr, flush=True)


_leave_path()
_install()


def _next_sitecustomize() -> None:
    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    mine = os.path.realpath(__file__)
    if spec is None or spec.loader is None or os.path.realpath(spec.origin or "") == mine:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_next_sitecustomize()

"""Run by Python at the start of a jupyter_air rank that may resume (see
``jupyter_air.jobs.autoresume``): hooks the HF Trainer and Lightning, then runs the
``sitecustomize`` this one hides, if any, once. A failure here never stops the rank; an
interpreter without jupyter_air (a workload's own Python) is left as it is."""

import importlib.machinery
import importlib.util
import os
import sys

try:
    from jupyter_air.jobs import autoresume
except ImportError:
    autoresume = None  # type: ignore[assignment]
if autoresume is not None:
    try:
        autoresume.install()
    except Exception as err:  # the rank runs, without resuming by itself
        print(f"[air] resuming by itself is off: {err!r}", file=sys.stderr, flush=True)


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

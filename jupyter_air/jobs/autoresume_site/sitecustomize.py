"""Run by Python at the start of a jupyter_air rank that may resume (see
``jupyter_air.jobs.autoresume``): hooks the HF Trainer and Lightning, then runs the
``sitecustomize`` this one hides, if any. A failure here never stops the rank."""

import importlib.machinery
import importlib.util
import os
import sys

try:
    from jupyter_air.jobs import autoresume

    autoresume.install()
except Exception as err:  # the rank runs, without resuming by itself
    print(f"[air] resuming by itself is off: {err!r}", file=sys.stderr, flush=True)


def _next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_next_sitecustomize()

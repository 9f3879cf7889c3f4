"""The MLflow UI child: ``mlflow server`` that ends with the Jupyter server that started it.

``python -m jupyter_air.tracking.ui_child <mlflow server options>``, started by
``ui_server`` as the leader of a process group of its own, with the write end of its
stdin held by the Jupyter server alone. However that server ends (stopped, SIGKILL,
out of memory), the system then closes the pipe, the read below returns EOF, and this
process ends its whole group: itself and the uvicorn that ``mlflow server`` starts.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
import time

GRACE = 3.0


def _end_with_the_server() -> None:
    while os.read(0, 1024):
        pass
    os.killpg(0, signal.SIGTERM)
    time.sleep(GRACE)
    os.killpg(0, signal.SIGKILL)


def main() -> None:
    if os.getpgrp() != os.getpid():
        sys.exit("ui_child must lead its own process group: it ends that group")
    threading.Thread(target=_end_with_the_server, name="end-with-server", daemon=True).start()
    sys.argv = ["mlflow", "server", *sys.argv[1:]]
    runpy.run_module("mlflow", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

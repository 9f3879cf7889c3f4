"""The Jupyter server settings of ``make demo``'s JupyterLab, and of the browser test
that starts a lab as it does (tests/ui/test_demo_terminal.py): a terminal finds ``air``,
and kernels use Unix sockets.

``make demo`` adds this folder to ``JUPYTER_CONFIG_PATH``, so these settings come on top
of the user's own, which win where both set something (``--config`` would drop the
user's ``jupyter_server_config`` instead).

Why not just the PATH the lab inherits: Jupyter starts a terminal as a login shell when
the server's output is not a terminal, and a login shell's ``/etc/profile`` (Debian's)
sets PATH afresh. So bash is started on ``terminal.bashrc``, which reads the startup
files a login shell reads, in the same order, then puts the scripts folder of the
Python serving the lab (where pip put ``air``) first on PATH, as a venv's ``activate``
does. This is what VS Code's terminal does for bash. Other shells keep Jupyter's own
command and rely on the inherited PATH (Debian's zsh keeps it; its sh resets it).
"""

import os
import shutil
import sysconfig
from pathlib import Path

c = get_config()  # noqa: F821

# Kernels talk to the server over Unix sockets beside their connection files (in
# Jupyter's runtime folder, private to the user), not over loopback TCP, where any
# local user could connect (unencrypted: ipykernel warns of it at each kernel's start).
c.KernelManager.transport = "ipc"

shell = os.environ.get("SHELL") or shutil.which("bash") or ""
if Path(shell).name == "bash":
    c.ServerApp.terminado_settings = {
        "shell_command": [
            "env",
            f"AIR_DEMO_BIN={sysconfig.get_path('scripts')}",
            shell,
            "--rcfile",
            str(Path(__file__).with_name("terminal.bashrc")),
            "-i",
        ]
    }

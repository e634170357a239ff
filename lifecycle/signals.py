"""What a child process of the server (an engine worker, a worker template, an upload decoder, the pronunciation
compile process) does with the signals meant to stop the server.

Ctrl+C in a terminal sends SIGINT to the whole foreground process group, and many supervisors send SIGTERM to a whole
group or cgroup rather than to the server alone: systemd's default ``KillMode=control-group``, ``timeout``, a
container without an init, supervisord's ``stopasgroup``. Were a child to die of it, the server would lose the workers
its in-flight streams run on at the moment its drain begins. So the children ignore both, and the server ends them
itself once it has drained (``server.shutdown_grace_s``): with the close of their pipe, and SIGKILL for one that does
not end (``engines/pool/``, ``engines/template.py``, ``gateway/uploads/processes.py``), which no process can ignore.
A child whose server is gone ends by itself too: its pipe to the server reads end-of-file.
"""

from __future__ import annotations

import signal

__all__ = ["STOP_SIGNALS", "leave_stopping_to_the_server"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""What stops the server, and may reach its children too (the module docstring)."""


def leave_stopping_to_the_server() -> None:
    """Ignore :data:`STOP_SIGNALS` in this process (a child of the server): call it first thing.

    Ignored, not handled: an ignored disposition survives ``fork`` and ``exec``, so what a child forks or starts is
    covered from its first instruction.
    """
    for stop in STOP_SIGNALS:
        signal.signal(stop, signal.SIG_IGN)

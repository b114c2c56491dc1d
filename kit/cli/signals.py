"""One way for long commands to stop: Ctrl-C and SIGTERM both unwind as KeyboardInterrupt.

`kit up`, `kit repro`, `kit image verify`, `kit preflight` and `kit bisect` hold containers while
they run; unwinding runs their cleanup, and the CLI's edge turns the interrupt into exit 130.
"""

from __future__ import annotations

import signal


def interruptible() -> None:
    """Install the handlers. SIGINT gets Python's own handler back even when the kit was started
    with SIGINT ignored (nohup, some CI runners): otherwise Ctrl-C could not stop it and its
    container would stay."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, handler)

"""What a child process gets when it is started from a terminal, whoever started the tests."""

from __future__ import annotations

import signal


def ctrl_c_as_at_a_terminal() -> None:
    """preexec_fn for a server a test stops with Ctrl-C (SIGINT). A shell that runs the tests as a
    background job (`cmd &` without job control) starts them with SIGINT ignored, their children
    inherit that, and Python then installs no KeyboardInterrupt handler: the server would never see
    the Ctrl-C the test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

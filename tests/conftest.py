"""Set-up shared by every test directory.

Signal dispositions. A command a non-interactive shell starts in the background (`./dev test &`)
has SIGINT and SIGQUIT ignored (POSIX, Shell Command Language 2.11 "Signals and Error
Handling"), `nohup` ignores SIGHUP, and an ignored disposition survives fork and exec
(signal(7)). Every process the suite starts would then ignore them too, and the tests that
send them (Ctrl-C on drain and verify, `drainsafe run` forwarding SIGHUP to its server) would
see nothing arrive: they failed only in backgrounded runs. The suite puts the defaults back in
its own process, so what it starts behaves as under a terminal, which is what those tests
are about. xdist's workers run this too.
"""

from __future__ import annotations

import signal

import pytest

# SIGINT's default in a Python process is the KeyboardInterrupt handler, which exec resets
# to SIG_DFL in children.
_DEFAULTS = {signal.SIGINT: signal.default_int_handler, signal.SIGQUIT: signal.SIG_DFL,
             signal.SIGHUP: signal.SIG_DFL}


def pytest_configure(config: pytest.Config) -> None:
    for signum, handler in _DEFAULTS.items():
        if signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, handler)

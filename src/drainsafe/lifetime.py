"""Child processes that cannot outlive the process that started them.

A supervisor that is killed (SIGKILL, a crash, a CI job cancelled, pytest-timeout) runs no
cleanup, and its children, each in a session of its own, are re-parented to init and keep
running: a server still holding its port and GPU memory, a lab pod answering for a cluster
that is gone. Linux's prctl(PR_SET_PDEATHSIG) has the kernel send the child a signal when
its parent thread exits (man 2 prctl), so the child goes with it. Elsewhere it is a no-op.
"""

from __future__ import annotations

import contextlib
import os
import signal

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the parent thread exits. The parent must
    fork from a thread that lives as long as the child should (the event loop's)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def own_session_dying_with_parent() -> None:
    """In the child, before exec: a session of its own (signals reach it only as the
    parent decides), and SIGKILL when the parent exits."""
    os.setsid()
    die_with_parent()

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
    # Keep the order pytest_collection_modifyitems sets: xdist would otherwise sort the files
    # by their number of tests.
    if getattr(config.option, "dist", "no") == "loadfile":
        config.option.loadscopereorder = False


# `./dev test` runs files on xdist workers with --dist loadfile: a file runs whole on one
# worker, and the files are handed out in queue order, each worker taking the next once it is
# nearly done. xdist's default queue puts the files with the most tests first, which are the
# fast unit files, so a single 2-minute lab scenario could start last and run alone at the
# end. The longest files go first instead (longest processing time first); seconds measured
# with 4 workers on the 2-core machine, for the order only. Other files that run real
# processes (marked e2e) come next, then the rest in collection order.
LONGEST_SECONDS = {
    "tests/demo/test_demo.py": 110,
    "tests/controller/test_guard_acceptance.py": 105,
    "tests/controller/test_maintenance_kills_lab.py": 95,
    "tests/controller/test_guard_statefulset.py": 80,
    "tests/verify/test_lab_tune.py": 70,
    "tests/drain/test_statefulset_drain.py": 55,
    "tests/drain/test_acceptance.py": 60,
    "tests/drain/test_group_drain.py": 60,
    "tests/controller/test_maintenance_phases_lab.py": 50,
    "tests/controller/test_maintenance_acceptance_lab.py": 60,
    "tests/controller/test_guard_lws.py": 55,
    "tests/controller/test_maintenance_lab.py": 15,
    "tests/drain/test_faults.py": 40,
    "tests/server/test_server_shutdown.py": 45,
    "tests/controller/test_controller_lab.py": 30,
    "tests/simulate/test_sim_lab.py": 70,
    "tests/lab/test_statefulset.py": 40,
    "tests/lab/test_kubectl_lab.py": 35,
    "tests/controller/test_maintenance_metrics_lab.py": 20,
    "tests/lab/test_crd.py": 30,
    "tests/server/test_hardening.py": 30,
    "tests/drain/test_surge_faults.py": 30,
    "tests/drain/test_shared_surge_lab.py": 45,
    "tests/check/test_snippets.py": 10,
    "tests/simulate/test_sim_reference.py": 25,
}
E2E_SECONDS = 20  # a lab scenario not listed


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def seconds(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        if path in LONGEST_SECONDS:
            return LONGEST_SECONDS[path]
        return E2E_SECONDS if item.get_closest_marker("e2e") else 0

    items.sort(key=lambda item: -seconds(item))  # stable: a file's tests keep their order

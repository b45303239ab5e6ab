"""torch is imported in the background while the standard-library phases run; a slow
import is a warning naming the node and the seconds, one that outlasts the budget is
TorchImportTimeout, never ProbeInternalError."""
from __future__ import annotations

import time

from probe_helpers import free_port, probe_env, run_ranks

from disttrain.diagnosis.report import parse_report
from disttrain_probe.contract import vocabulary
from disttrain_probe.ground.torchload import SLOW_IMPORT_SECONDS, TorchLoader


def test_loader_runs_in_the_background_and_times_itself():
    t0 = time.monotonic()
    ld = TorchLoader(lambda: (time.sleep(0.3), {"versions": {"torch": "x"}})[1]).start()
    assert time.monotonic() - t0 < 0.2 and not ld.done  # start() does not wait
    assert not ld.wait(0.05)
    assert ld.wait(5) and ld.versions == {"torch": "x"} and ld.error is None
    assert 0.25 < ld.seconds < 2 and ld.slow_warning("node-a") is None


def test_loader_starts_once_and_its_fallback_timer_starts_it_when_the_inventory_is_slow():
    calls = []
    ld = TorchLoader(lambda: (calls.append(1), {})[1])
    timer = ld.start_after(0.2)
    time.sleep(0.05)
    assert ld.started is None  # the inventory still has its head start
    assert ld.wait(3) and calls == [1]  # the timer started it
    timer.join(1)
    ld.start()  # the probe's own start after a slow inventory: no second import
    time.sleep(0.05)
    assert calls == [1]
    early = TorchLoader(lambda: (calls.append(2), {})[1])
    t = early.start_after(0.3)
    early.start()  # the inventory finished first
    assert early.wait(3)
    t.join(1)
    assert calls == [1, 2]  # the timer did not import a second time


def test_loader_reports_a_failed_import_and_a_slow_one():
    def boom():
        raise ImportError("libcudart.so.12: cannot open shared object file")
    ld = TorchLoader(boom).start()
    assert ld.wait(5) and ld.error.startswith("ImportError: libcudart.so.12")
    slow = TorchLoader(lambda: {})
    slow.seconds = SLOW_IMPORT_SECONDS + 2.5
    w = slow.slow_warning("node-b")
    assert w["reason"] == vocabulary.SLOW_TORCH_IMPORT and w["message"].startswith("node-b: importing torch took 22.5s")


def test_slow_import_on_one_rank_is_a_warning_not_an_internal_error(tmp_path):
    port = free_port()
    envs = [probe_env(r, 2, port, DISTTRAIN_PROBE_SOCKET_IFNAME="lo",
                      DISTTRAIN_PROBE_TIMEOUT_SECONDS="45",
                      DISTTRAIN_PROBE_SLOW_IMPORT_SECONDS="3") for r in range(2)]
    # rank 1's import takes 8 s more than rank 0's (both also pay the real import)
    envs[1]["DISTTRAIN_PROBE_TEST_TORCH_DELAY"] = "8"
    runs = run_ranks(envs, tmp_path, timeout=90)
    reps = [parse_report(r.report_text) for r in runs]
    assert [r.rc for r in runs] == [0, 0], [x.failure for x in reps]
    slow = [w for w in reps[1].warnings if w.reason == vocabulary.SLOW_TORCH_IMPORT]
    assert slow and f"{reps[1].node}: importing torch took " in slow[0].message
    assert reps[1].timings["torchImport"] > 8 and "(more than 3s)" in slow[0].message
    assert reps[1].timings["torchImport"] > reps[0].timings["torchImport"] + 5


def test_import_past_the_budget_is_torch_import_timeout(tmp_path):
    port = free_port()
    envs = [probe_env(r, 2, port, DISTTRAIN_PROBE_SOCKET_IFNAME="lo",
                      DISTTRAIN_PROBE_TIMEOUT_SECONDS="12") for r in range(2)]
    envs[1]["DISTTRAIN_PROBE_TEST_TORCH_DELAY"] = "60"
    runs = run_ranks(envs, tmp_path, timeout=60)
    rep1 = parse_report(runs[1].report_text)
    assert runs[1].rc == 1 and rep1.failure.reason == vocabulary.TORCH_IMPORT_TIMEOUT, rep1.failure
    assert rep1.failure.message.startswith(f"{rep1.node}: importing torch took more than")
    assert runs[1].seconds < 25  # it gives up within its budget (12 s + the watchdog's grace)
    rep0 = parse_report(runs[0].report_text)
    assert rep0.failure.reason != vocabulary.PROBE_INTERNAL_ERROR, rep0.failure
    # rank 1 never joined rank 0's store (its report says so: the operator need not wait for
    # rank 0, which waits for it); rank 0 served it
    assert (rep1.master.joined, rep0.master.joined) == (False, True)

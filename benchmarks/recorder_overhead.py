"""What the progress recorder costs a training loop (issue 33, item 1).

Two gloo ranks on 127.0.0.1 run a loop of ``all_reduce`` (a small tensor, and a larger one
with a matmul standing in for a step's compute) for a fixed time; rank 0 reports steps/s
after a warm-up. Each configuration starts its two processes through the real startup path
(``disttrain_probe.install`` into a directory put on PYTHONPATH, so the ``sitecustomize`` is
there in every run):

* ``off``: ``DISTTRAIN_PROGRESS_DIR`` unset (the sitecustomize only chains);
* ``recorder``: ``DISTTRAIN_PROGRESS_DIR`` set (the recorder thread wakes every second);
* ``recorder+fr``: also ``TORCH_FR_BUFFER_SIZE=2000`` (torch's Flight Recorder keeps every
  collective; the recorder reads it only once seq stood still for 3 s);
* ``recorder x100``: the same recorder started by the loop itself waking every 10 ms
  instead of every second: its cost, amplified 100 times, rises above this machine's noise
  (divide its loss by 100 for the real one).

Runs alternate between configurations (off, recorder, recorder+fr, off, ...), and the report
gives the median steps/s of each and the ratios to ``off`` measured in the same script. Then,
less exposed to a shared machine's drift, paired windows in the same two processes: the
recorder's loop (waking every second as shipped, and every 10 ms) switched on and off every
~0.3 s window, the median over pairs of steps/s on / off. A
separate process (one gloo rank) times one recorder wake (``Recorder.tick``) and one Flight
Recorder read with a full buffer of 2000 entries, in microseconds (median of many).

    .venv/bin/python benchmarks/recorder_overhead.py --runs 5 --seconds 4
Results: benchmarks/results/recorder.{md,json}. Wall-clock time on a shared machine: noisy,
which is why every figure is a median and a ratio against the baseline run beside it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"

LOOP = textwrap.dedent("""\
    import json, os, time
    import torch, torch.distributed as dist
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["PORT"], rank=rank, world_size=2)
    torch.set_num_threads(1)
    size, seconds = int(os.environ["SIZE"]), float(os.environ["SECONDS"])
    t, w = torch.ones(size), torch.ones(int(os.environ["MATMUL"]), int(os.environ["MATMUL"]))
    def step():
        if w.shape[0] > 1:
            (w @ w).sum()
        dist.all_reduce(t)
    if os.environ.get("WAKE_EVERY_S"):  # the amplified configuration: the same thread, waking 100x as often
        import threading
        from disttrain_probe.progress import recorder
        rec = recorder.Recorder(os.environ["PROGRESS"], interval=float(os.environ["WAKE_EVERY_S"]))
        threading.Thread(target=rec.run, daemon=True).start()
    for _ in range(20):
        step()
    flag = torch.zeros(1)
    steps, t0 = 0, time.perf_counter()
    while True:  # both ranks stop at the same step: rank 0 decides, every 50 steps
        for _ in range(50):
            step()
        steps += 50
        flag[0] = float(time.perf_counter() - t0 >= seconds)
        dist.broadcast(flag, 0)
        if flag[0]:
            break
    if rank == 0:
        print(json.dumps({"steps_per_s": steps / (time.perf_counter() - t0), "steps": steps}))
    dist.destroy_process_group()
    """)

PAIRED = textwrap.dedent("""\
    import json, os, statistics, threading, time
    import torch, torch.distributed as dist
    from disttrain_probe.progress import recorder
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["PORT"], rank=rank, world_size=2)
    torch.set_num_threads(1)
    size, pairs = int(os.environ["SIZE"]), int(os.environ["PAIRS"])
    t, w = torch.ones(size), torch.ones(int(os.environ["MATMUL"]), int(os.environ["MATMUL"]))
    def step():
        if w.shape[0] > 1:
            (w @ w).sum()
        dist.all_reduce(t)
    rec = recorder.Recorder(os.environ["PROGRESS"], interval=float(os.environ["WAKE_EVERY_S"]))
    active = threading.Event()
    def wake():  # the recorder's loop, switched on and off by window
        while not rec.stop.wait(rec.interval):
            if active.is_set():
                rec.tick()
    threading.Thread(target=wake, daemon=True).start()
    t0 = time.perf_counter()
    for _ in range(20):
        step()
    window = torch.tensor([max(10, int(0.3 / ((time.perf_counter() - t0) / 20)))])
    dist.broadcast(window, 0)  # both ranks switch at the same step
    ratios = []
    for i in range(pairs):
        took = {}
        for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
            (active.set if mode == "on" else active.clear)()
            t1 = time.perf_counter()
            for _ in range(int(window[0])):
                step()
            took[mode] = time.perf_counter() - t1
        ratios.append(took["off"] / took["on"])
    if rank == 0:
        print(json.dumps({"ratio": statistics.median(ratios), "pairs": pairs, "window_steps": int(window[0])}))
    dist.destroy_process_group()
    """)

TICK = textwrap.dedent("""\
    import json, os, statistics, sys, tempfile, time
    import torch, torch.distributed as dist
    from disttrain_probe.progress import recorder
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["PORT"], rank=0, world_size=1)
    t = torch.ones(4)
    for _ in range(2500):
        dist.all_reduce(t)
    rec = recorder.Recorder(tempfile.mkdtemp())
    def timed(fn, n):
        out = []
        for _ in range(n):
            t0 = time.perf_counter(); fn(); out.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(out)
    def advancing():
        dist.all_reduce(t)  # seq moves between wakes, as in training (not timed below)
    ticks = []
    for _ in range(300):
        advancing()
        t0 = time.perf_counter(); rec.tick(); ticks.append((time.perf_counter() - t0) * 1e6)
    fr = timed(recorder._flight_recorder, 20)
    # the share exchange: a store operation of its own client (3 a window, 25 for a rank
    # that may be the straggler), against a TCPStore server in this process
    import datetime
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=10))
    client = dist.TCPStore("127.0.0.1", server.port, is_master=False, timeout=datetime.timedelta(seconds=10))
    store_op = timed(lambda: client.add("disttrain/progress/shares/1/n", 1), 300)
    print(json.dumps({"tick_us": statistics.median(ticks), "fr_read_us": fr, "store_op_us": store_op,
                      "fr_entries": int(os.environ.get("TORCH_FR_BUFFER_SIZE", "0"))}))
    dist.destroy_process_group()
    """)

CONFIGS = {
    "off": {},
    "recorder": {"DISTTRAIN_PROGRESS_DIR": "{progress}"},
    "recorder+fr": {"DISTTRAIN_PROGRESS_DIR": "{progress}", "TORCH_FR_BUFFER_SIZE": "2000"},
    "recorder x100": {"PROGRESS": "{progress}", "WAKE_EVERY_S": "0.01", "PYTHONPATH": "{site}" + os.pathsep + "{inst}"},
}
LOADS = {  # name -> (all_reduce floats, matmul side)
    "small all_reduce (16 floats)": (16, 1),
    "1M-float all_reduce + 256x256 matmul": (1 << 20, 256),
}


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _env(site: Path, extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DISTTRAIN_PROGRESS_DIR", "TORCH_FR_BUFFER_SIZE")}
    env["PYTHONPATH"] = str(site)
    env.update(extra)
    return env


def run_loop(site: Path, tmp: Path, config: str, load: tuple, seconds: float) -> float:
    progress = tmp / f"progress-{config}"
    extra = {k: v.format(progress=progress, site=site, inst=site.parent) for k, v in CONFIGS[config].items()}
    port = str(free_port())
    script = tmp / "loop.py"
    script.write_text(LOOP)
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=_env(site, {**extra, "RANK": str(r), "PORT": port,
                                                         "SIZE": str(load[0]), "MATMUL": str(load[1]),
                                                         "SECONDS": str(seconds)}))
             for r in (0, 1)]
    outs = [p.communicate(timeout=seconds + 120) for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"{config}: {outs[0][1][-500:]} {outs[1][1][-500:]}")
    if config != "off" and not (progress / "rank-0.json").exists():  # the recorder really ran
        raise RuntimeError(f"{config}: the recorder wrote no record")
    return json.loads(outs[0][0].strip().splitlines()[-1])["steps_per_s"]


def run_paired(site: Path, tmp: Path, load: tuple, wake_every: float, pairs: int) -> dict:
    port = str(free_port())
    script = tmp / "paired.py"
    script.write_text(PAIRED)
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=_env(site, {"RANK": str(r), "PORT": port, "SIZE": str(load[0]),
                                                         "MATMUL": str(load[1]), "PAIRS": str(pairs),
                                                         "PROGRESS": str(tmp / "progress-paired"),
                                                         "WAKE_EVERY_S": str(wake_every),
                                                         "PYTHONPATH": f"{site}{os.pathsep}{site.parent}"}))
             for r in (0, 1)]
    outs = [p.communicate(timeout=600) for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"paired: {outs[0][1][-500:]} {outs[1][1][-500:]}")
    return json.loads(outs[0][0].strip().splitlines()[-1])


def run_tick(site: Path, fr: bool) -> dict:
    env = _env(site, {"PORT": str(free_port())})
    if fr:
        env["TORCH_FR_BUFFER_SIZE"] = "2000"
    env["PYTHONPATH"] = f"{site}{os.pathsep}{site.parent}"
    out = subprocess.run([sys.executable, "-c", TICK], env=env, capture_output=True, text=True, timeout=300)
    if out.returncode:
        raise RuntimeError(out.stderr[-800:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(results: dict, ticks: list, args, paired: Optional[dict] = None) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    lines = [
        "# Progress recorder overhead (benchmarks/recorder_overhead.py)", "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPU(s) ({platform.machine()}), "
        f"commit {commit}, Python {platform.python_version()}, torch {_torch_version()}; "
        f"{args.runs} alternating runs of {args.seconds:g} s per configuration, two gloo ranks on 127.0.0.1. "
        "Median steps/s of rank 0; ratio = configuration / off (1.000 = no cost).", "",
        "| load | step time (off) | off steps/s | recorder steps/s | ratio | recorder+fr steps/s | ratio "
        "| recorder x100 steps/s | ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for load, by in results.items():
        med = {c: statistics.median(v) for c, v in by.items()}
        lines.append(f"| {load} | {1e3 / med['off']:.2f} ms | {med['off']:.0f} | {med['recorder']:.0f} | "
                     f"{med['recorder'] / med['off']:.3f} | {med['recorder+fr']:.0f} | "
                     f"{med['recorder+fr'] / med['off']:.3f} | {med['recorder x100']:.0f} | "
                     f"{med['recorder x100'] / med['off']:.3f} |")
    lines += ["", "Per run (steps/s, in run order):", ""]
    for load, by in results.items():
        lines.append(f"- {load}: " + "; ".join(f"{c} " + ", ".join(f"{x:.0f}" for x in v) for c, v in by.items()))
    if paired:
        lines += ["", "Paired windows in the same two processes (less exposed to the machine's drift): the "
                  "recorder's loop switched on and off every ~0.3 s window, alternating which comes first; "
                  "median over pairs of steps/s on / off:", "",
                  "| load | wakes every 1 s (as shipped) | wakes every 10 ms (x100) | window steps |", "|---|---|---|---|"]
        for load, by in paired.items():
            lines.append(f"| {load} | {by['1']['ratio']:.4f} | {by['0.01']['ratio']:.4f} | {by['1']['window_steps']} |")
    lines += ["", "One recorder wake and one Flight Recorder read (one gloo rank, median):", "",
              "| TORCH_FR_BUFFER_SIZE | wake (Recorder.tick) us | Flight Recorder read us |", "|---|---|---|"]
    for t in ticks:
        lines.append(f"| {t['fr_entries'] or 'unset'} | {t['tick_us']:.0f} | {t['fr_read_us']:.0f} |")
    wake = max(t["tick_us"] for t in ticks)
    op = max(t.get("store_op_us", 0.0) for t in ticks)
    lines += ["", f"The wait-share exchange (progress/shares.py): one store operation of its own TCPStore "
              f"client takes {op:.0f} us here (median, loopback); a rank makes 3 a 30 s window, 25 when it "
              f"may be the straggler, in a thread of its own that releases the GIL while it waits: at most "
              f"{25 * op / 30:.0f} us per second of wall time, {25 * op / 30 / 1e4:.4f} %."]
    lines += ["", "How to read it: the recorder's whole cost is one wake a second (plus, only while seq "
              "stands still, a Flight Recorder read at most every 30 s), so its share of any step time is "
              f"at most one wake per second of CPU: {wake:.0f} us / 1 s = {wake / 1e4:.3f} % here (a thread "
              "that holds the GIL that long delays the training thread as much). The steps/s columns are "
              "the end-to-end check; on a shared machine their run-to-run spread (see the runs) is far "
              "larger than that, so a ratio away from 1.000 there is noise unless the amplified column "
              "(100 wakes a second) falls by about 100 times the bound too."]
    return "\n".join(lines) + "\n"


def _torch_version() -> str:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                         text=True)
    return out.stdout.strip() or "?"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--pairs", type=int, default=30, help="on/off window pairs in the paired measurement")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "probe_image"))
    from disttrain_probe import install

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        site = tmp / "inst" / install.SITE
        install.install(str(site.parent))
        results = {load: {c: [] for c in CONFIGS} for load in LOADS}
        for i in range(args.runs):
            for load, shape in LOADS.items():
                for config in CONFIGS:
                    results[load][config].append(run_loop(site, tmp, config, shape, args.seconds))
                    print(f"run {i + 1} {load} {config}: {results[load][config][-1]:.0f} steps/s", flush=True)
        paired = {load: {str(every): run_paired(site, tmp, shape, every, args.pairs) for every in (1, 0.01)}
                  for load, shape in LOADS.items()}
        print(f"paired: {paired}", flush=True)
        ticks = [run_tick(site, fr=False), run_tick(site, fr=True)]
    text = report(results, ticks, args, paired)
    print(text)
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "recorder.json").write_text(json.dumps({"steps_per_s": results, "paired": paired, "wake": ticks},
                                                          indent=1) + "\n")
        (RESULTS / "recorder.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

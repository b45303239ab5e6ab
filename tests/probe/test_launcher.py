"""The probe under launchers: torchrun's agent store and Slurm's variables."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from probe_helpers import ROOT, free_port

from disttrain_probe.ground import config as C
from disttrain_probe.ground import launcher as L


@pytest.mark.parametrize("nodelist,first", [
    ("gpu07", "gpu07"),
    ("gpu[07-09,01]", "gpu07"),
    ("gpu[007-009]", "gpu007"),
    ("login1,gpu[1-2]", "login1"),
    ("gpu[3,5-6],cpu[01-02]", "gpu3"),
    ("rack[2-3]-n[001-004]", "rack2-n001"),
    ("dgx-a100-[12-15].cluster", "dgx-a100-12.cluster"),
])
def test_first_host(nodelist, first):
    assert L.first_host(nodelist) == first


@pytest.mark.parametrize("bad", ["", "gpu[1-2", "gpu1-2]", "gpu[a-b]", "gpu[]", ","])
def test_first_host_refuses_malformed_lists(bad):
    with pytest.raises(L.LauncherError):
        L.first_host(bad)


def test_split_nodelist():
    assert L.split_nodelist("gpu[01-02,05],cpu3") == ["gpu[01-02,05]", "cpu3"]


def test_first_host_property_expanded_by_hand():
    hyp = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")

    @hyp.settings(max_examples=200, deadline=None, derandomize=True)
    @hyp.given(st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True),
               st.integers(0, 999), st.integers(0, 50), st.integers(1, 4),
               st.lists(st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True), max_size=3))
    def check(prefix, lo, span, width, others):
        text = f"{prefix}[{lo:0{width}d}-{lo + span:0{width}d}]"
        assert L.first_host(",".join([text] + others)) == f"{prefix}{lo:0{width}d}"

    check()


def test_slurm_fills_rank_world_master_and_keeps_what_the_user_set():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
           "SLURM_JOB_NODELIST": "gpu[12-15]", "SLURM_JOB_ID": "123456",
           "SLURMD_NODENAME": "gpu14", "SLURM_TASKS_PER_NODE": "2(x4)", "SLURM_JOB_NUM_NODES": "4"}
    out, launch = L.resolve(env)
    assert launch == L.Launch(L.SLURM, False, "", 2, False)
    assert (out["RANK"], out["WORLD_SIZE"], out["LOCAL_RANK"]) == ("5", "8", "1")
    assert out["MASTER_ADDR"] == "gpu12" and out["NODE_NAME"] == "gpu14"
    assert out["MASTER_PORT"] == str(L.slurm_port("123456")) == "23456"
    cfg = C.load([], env)
    assert (cfg.rank, cfg.world_size, cfg.local_rank, cfg.master_addr, cfg.master_port) == \
        (5, 8, 1, "gpu12", 23456)
    assert cfg.launcher == "slurm" and not cfg.agent_store
    mine = dict(env, MASTER_ADDR="10.0.0.9", MASTER_PORT="29400")
    cfg = C.load(["--rank", "3"], mine)
    assert (cfg.rank, cfg.master_addr, cfg.master_port) == (3, "10.0.0.9", 29400)


def test_slurm_inconsistent_variables_are_a_config_error():
    with pytest.raises(C.ConfigError, match="SLURM_PROCID=8 must be < SLURM_NTASKS=8"):
        C.load([], {"SLURM_PROCID": "8", "SLURM_NTASKS": "8", "SLURM_NODELIST": "a1"})
    with pytest.raises(C.ConfigError, match="node list"):
        C.load([], {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_NODELIST": "a[1-"})


def test_torchrun_agent_store():
    env = {"TORCHELASTIC_RUN_ID": "job7", "TORCHELASTIC_RESTART_COUNT": "2",
           "TORCHELASTIC_USE_AGENT_STORE": "True", "RANK": "0", "WORLD_SIZE": "16",
           "LOCAL_WORLD_SIZE": "8", "GROUP_WORLD_SIZE": "2", "LOCAL_RANK": "0",
           "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    out, launch = L.resolve(env)
    assert launch == L.Launch(L.TORCHRUN, True, "disttrain/job7/2/", 8, False)
    assert "DISTTRAIN_PROBE_SOCKET_IFNAME" not in out  # two nodes: the probe chooses
    cfg = C.load([], env)
    assert cfg.agent_store and cfg.store_prefix == "disttrain/job7/2/" and cfg.launcher == "torchrun"
    single = dict(env, WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", GROUP_WORLD_SIZE="1",
                  MASTER_ADDR="127.0.0.1")
    out, launch = L.resolve(single)
    assert launch.single_node and out["DISTTRAIN_PROBE_SOCKET_IFNAME"] == "lo"
    assert C.load([], dict(single, DISTTRAIN_PROBE_SOCKET_IFNAME="eth1")).socket_ifname == "eth1"


def test_plain_environment_is_unchanged():
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"}
    out, launch = L.resolve(env)
    assert out == env and launch == L.Launch()
    assert not C.load([], env).agent_store


def test_probe_passes_under_a_real_torchrun(tmp_path):
    """torchrun's agent holds MASTER_PORT; the probe's rank 0 joins that store instead of
    binding the port (before, it failed with 'Address already in use')."""
    torchrun = Path(sys.executable).parent / "torchrun"
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    for k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "RANK", "WORLD_SIZE", "MASTER_ADDR",
              "MASTER_PORT", "DISTTRAIN_PROBE_SOCKET_IFNAME"):
        env.pop(k, None)
    p = subprocess.run([str(torchrun), "--nnodes", "1", "--nproc-per-node", "2",
                        "--master-addr", "127.0.0.1", "--master-port", str(port),
                        "-m", "disttrain_probe", "--timeout-seconds", "40",
                        "--iterations", "3", "--report-path", str(tmp_path / "report.json")],
                       cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    reports = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith('{"v":')]
    assert sorted(r["rank"] for r in reports) == [0, 1]
    for r in reports:
        assert r["ok"] and r["worldSize"] == 2 and r["failure"] is None
        assert r["master"]["port"] == port and r["allreduce"]["correct"] is True
    assert "Address already in use" not in p.stdout + p.stderr

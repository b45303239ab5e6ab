"""Which images a real node imports, and the disk floors that keep the kubelet from
deleting them (nodeimages/archives.py, realnode/base.py, nodeconfig.py, processes.py).

The case behind them: under disk pressure the kubelet deletes every image no pod runs;
here images are imported, never pulled back, and a marker per archive claimed them still
there, so every later pod on that node failed (one CI run lost node-a's and node-b's).
"""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localcluster.common.config import node_spec_by_name
from localcluster.nodeimages import archives
from localcluster.nodes import processes
from localcluster.nodes.realnode import base
from localcluster.nodes.realnode.nodeconfig import kubelet_config

LS = """REF                                        TYPE                                                 DIGEST                                                                  SIZE      PLATFORMS   LABELS
ghcr.io/disttrain/disttrain-probe:0.1.0    application/vnd.docker.distribution.manifest.v2+json sha256:aaaa  243.1 MiB linux/amd64 io.cri-containerd.image=managed
localhost/disttrain/pause:3.10             application/vnd.docker.distribution.manifest.v2+json sha256:bbbb  1.4 MiB   linux/amd64 -
broken line
"""
PROBE = ("ghcr.io/disttrain/disttrain-probe:0.1.0", "/cache/archives/disttrain-probe-1111222233334444.tar")
PAUSE = ("localhost/disttrain/pause:3.10", "/cache/archives/pause-5555666677778888.tar")


def test_images_ls_is_read_as_ref_to_digest():
    assert archives.parse_images_ls(LS) == {PROBE[0]: "sha256:aaaa", PAUSE[0]: "sha256:bbbb"}


def _mark(marks, pair, digest):
    (marks / pair[1].rsplit("/", 1)[1]).write_text(f"{pair[0]} {digest}\n")


def test_an_image_marked_and_present_with_its_digest_is_not_imported_again(tmp_path):
    _mark(tmp_path, PROBE, "sha256:aaaa")
    _mark(tmp_path, PAUSE, "sha256:bbbb")
    assert archives.stale([PROBE, PAUSE], tmp_path, archives.parse_images_ls(LS)) == []


def test_an_image_the_kubelet_deleted_is_imported_again_despite_its_marker(tmp_path):
    _mark(tmp_path, PROBE, "sha256:aaaa")
    _mark(tmp_path, PAUSE, "sha256:bbbb")
    present = archives.parse_images_ls(LS)
    del present[PROBE[0]]
    assert archives.stale([PROBE, PAUSE], tmp_path, present) == [PROBE]


def test_a_ref_holding_another_archives_image_is_imported_again(tmp_path):
    """Switched back to an older build whose archive was imported before: the ref holds
    the newer digest, so the older archive goes in again."""
    _mark(tmp_path, PROBE, "sha256:old0")
    assert archives.stale([PROBE], tmp_path, archives.parse_images_ls(LS)) == [PROBE]


@pytest.mark.parametrize("content", ["", "ghcr.io/disttrain/disttrain-probe:0.1.0\n",
                                     "other:1 sha256:aaaa\n", "a b c\n"])
def test_a_missing_or_old_style_marker_means_import(tmp_path, content):
    (tmp_path / PROBE[1].rsplit("/", 1)[1]).write_text(content)
    assert archives.stale([PROBE], tmp_path, archives.parse_images_ls(LS)) == [PROBE]


@given(present=st.dictionaries(st.sampled_from([PROBE[0], PAUSE[0], "x:1"]),
                               st.sampled_from(["sha256:aaaa", "sha256:bbbb", "sha256:cccc"])),
       marked=st.dictionaries(st.sampled_from([0, 1]), st.sampled_from(["sha256:aaaa", "sha256:bbbb"])))
def test_stale_imports_exactly_what_the_node_lacks(tmp_path_factory, present, marked):
    """Oracle: an archive is skipped iff its marker names the digest its ref has now."""
    marks = tmp_path_factory.mktemp("marks")
    pairs = [PROBE, PAUSE]
    for i, digest in marked.items():
        _mark(marks, pairs[i], digest)
    want = [p for i, p in enumerate(pairs) if not (i in marked and present.get(p[0]) == marked[i])]
    assert archives.stale(pairs, marks, present) == want


def _node(name, **conds):
    return {"metadata": {"name": name}, "status": {"conditions": [
        {"type": t, "status": s, "message": f"{t} here"} for t, s in conds.items()]}}


def test_node_pressure_is_named_with_its_node_and_message():
    nodes = [_node("node-a", Ready="True", DiskPressure="True"),
             _node("node-b", Ready="True", DiskPressure="False", PIDPressure="False"),
             {"metadata": {"name": "node-c"}}]
    assert processes.node_pressures(nodes) == ["node-a: DiskPressure (DiskPressure here)"]


def test_the_kubelet_evicts_only_below_an_absolute_floor(tmp_path):
    """A percentage of the machine's shared disk (2% of 252 GB was 5 GB) put the nodes under
    pressure while gigabytes were free."""
    cfg = kubelet_config(tmp_path, node_spec_by_name("node-a"), tmp_path / "ca",
                         {"serving_crt": "c", "serving_key": "k"})
    assert cfg["evictionHard"]["nodefs.available"] == base.EVICTION_DISK_FLOOR == "1Gi"
    assert cfg["evictionHard"]["imagefs.available"] == base.EVICTION_DISK_FLOOR
    assert base.EVICTION_DISK_FLOOR_BYTES == 1 << 30


def test_up_refuses_a_disk_below_the_floor_and_says_how_to_free_it(monkeypatch, tmp_path):
    monkeypatch.setenv("DISTTRAIN_CACHE", str(tmp_path / "not-yet"))
    free = {"n": 10 << 30}
    monkeypatch.setattr(base.shutil, "disk_usage", lambda p: type("U", (), {"free": free["n"]})())
    base.check_disk()  # 10 GiB: enough
    free["n"] = 2 << 30
    with pytest.raises(base.RealNodeError, match=r"need 4 GiB.*below 1Gi.*2\.0 GiB free.*make prune-images"):
        base.check_disk()

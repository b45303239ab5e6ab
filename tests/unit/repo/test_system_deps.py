"""localcluster/build/system-deps.sh: which Debian packages it installs, why, and when it
refuses. The script runs for real under bash with PATH limited to a directory of stand-ins:
the system tools it looks for, and an ``apt-get`` that records its arguments and "installs"
a package by adding its tools to that directory (the real apt-get would change the machine).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "localcluster" / "build" / "system-deps.sh"
# Tools the script itself runs (real ones, linked in).
HELPERS = ["dirname", "sort", "head", "paste", "mktemp", "tail", "rm"]
# What the project needs, and the package the fake apt-get installs each from.
PACKAGE_TOOLS = {"iproute2": ["ip", "tc"], "nftables": ["nft"], "util-linux": ["unshare"],
                 "mount": ["umount"], "procps": ["sysctl"], "golang-go": ["go"], "make": ["make"]}

FAKE_APT = """#!/bin/sh
echo "$*" >> "$APT_LOG"
case " $* " in *" install "*) ;; *) exit 0 ;; esac
[ "${FAKE_APT_RC:-0}" = 0 ] || { echo "E: Unable to locate package $*"; exit "$FAKE_APT_RC"; }
for a in "$@"; do
  case "$a" in
    iproute2) set -- ip tc ;; nftables) set -- nft ;; util-linux) set -- unshare nsenter ;;
    mount) set -- umount ;; procps) set -- sysctl ;; golang-go) set -- go ;; make) set -- make ;;
    mmdebstrap) set -- mmdebstrap ;; buildah) set -- buildah ;; runc) set -- runc ;;
    containerd) set -- containerd ;; iptables) set -- iptables ;;
    containernetworking-plugins) /bin/mkdir -p "$CNI_DIR" && : > "$CNI_DIR/bridge"; continue ;;
    *) continue ;;
  esac
  for t in "$@"; do /bin/cp "$BIN/_tool" "$BIN/$t"; done
done
"""
FAKE_GO = """#!/bin/sh
printf 'go%s\\n%s\\n' "${FAKE_GO_VERSION:-1.26.8}" "${FAKE_GOTOOLCHAIN:-local}"
"""


@pytest.fixture
def sandbox(tmp_path):
    """A bin dir with every needed tool; returns (bin, run), run(**env) -> CompletedProcess."""
    b = tmp_path / "bin"
    b.mkdir()
    for h in HELPERS:
        os.symlink(shutil.which(h), b / h)
    (b / "_tool").write_text("#!/bin/sh\nexit 0\n")
    (b / "apt-get").write_text(FAKE_APT)
    (b / "id").write_text('#!/bin/sh\necho "${FAKE_UID:-0}"\n')
    for f in b.iterdir():
        if not f.is_symlink():
            f.chmod(0o755)
    for tools in PACKAGE_TOOLS.values():
        for t in tools:
            shutil.copy(b / "_tool", b / t)
    (b / "go").write_text(FAKE_GO)
    ca = tmp_path / "ca.crt"
    ca.write_text("cert\n")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    shutil.copy(b / "_tool", venv / "bin" / "python")  # the venv exists: no python check

    def run(*args, **env):
        full = {"PATH": str(b), "BIN": str(b), "APT_LOG": str(tmp_path / "apt.log"),
                "SYSTEM_DEPS_CA_BUNDLE": str(ca), "VENV": str(venv), **env}
        return subprocess.run(["/bin/bash", str(SCRIPT), *args], env=full, capture_output=True,
                              text=True, timeout=30)

    def apt_calls():
        log = tmp_path / "apt.log"
        return log.read_text().splitlines() if log.exists() else []

    run.apt_calls = apt_calls
    return b, run


def test_quiet_and_no_apt_when_everything_is_present(sandbox):
    _, run = sandbox
    p = run()
    assert (p.returncode, p.stdout, p.stderr) == (0, "", "")
    assert run.apt_calls() == []


def test_missing_nft_installs_nftables_saying_why(sandbox):
    b, run = sandbox
    (b / "nft").unlink()
    p = run()
    assert p.returncode == 0, p.stderr
    assert "installing nftables: nft: scenario firewalls" in p.stderr
    calls = run.apt_calls()
    assert calls[0].startswith("-q -o DPkg::Lock::Timeout=") and calls[0].endswith("update")
    assert calls[1].endswith("install -y --no-install-recommends nftables")
    assert (b / "nft").exists()


def test_one_package_for_two_tools_keeps_both_reasons(sandbox):
    b, run = sandbox
    for t in ("ip", "tc", "sysctl"):
        (b / t).unlink()
    p = run()
    assert p.returncode == 0, p.stderr
    line = next(ln for ln in p.stderr.splitlines() if "installing iproute2" in ln)
    assert "ip: network namespaces" in line and "tc: link rates" in line
    assert run.apt_calls()[-1].endswith("install -y --no-install-recommends iproute2 procps")


@pytest.mark.parametrize("remove,env,says,apt_ran", [
    # not root: names the command to run, installs nothing
    (["nft"], {"FAKE_UID": "1000"},
     ["run as root", "apt-get install -y --no-install-recommends nftables"], False),
    # apt-get fails: its own words, then what failed
    (["unshare"], {"FAKE_APT_RC": "100"},
     ["E: Unable to locate package", "apt-get install failed", "util-linux"], True),
    # no apt-get at all: which tools are missing
    (["apt-get", "nft"], {}, ["not a Debian machine", "nft:"], False),
])
def test_refusals_are_errors_that_say_why(sandbox, remove, env, says, apt_ran):
    b, run = sandbox
    for t in remove:
        (b / t).unlink()
    p = run(**env)
    assert p.returncode != 0
    for text in says:
        assert text in p.stderr, p.stderr
    assert bool(run.apt_calls()) == apt_ran


@pytest.mark.parametrize("version,toolchain,ok", [
    ("1.26.8", "local", True),
    ("1.19.8", "local", False),   # Debian 12's golang-go: cannot compile Kubernetes 1.37
    ("1.24.4", "local", False),   # new enough to switch toolchains, but told not to
    ("1.24.4", "auto", True),     # fetches the toolchain go.mod names
])
def test_go_version(sandbox, version, toolchain, ok):
    _, run = sandbox
    p = run(FAKE_GO_VERSION=version, FAKE_GOTOOLCHAIN=toolchain)
    assert (p.returncode == 0) == ok, p.stderr
    if not ok:
        assert f"is go {version}" in p.stderr and "Go >= 1.26" in p.stderr


def test_python_without_venv_support_gets_python3_venv(sandbox, tmp_path):
    b, run = sandbox
    (b / "python3").write_text("#!/bin/sh\nexit 1\n")  # `import ensurepip` fails, as on Debian
    (b / "python3").chmod(0o755)
    p = run(VENV=str(tmp_path / "no-venv-yet"), PY="python3")
    assert "installing python3-venv: python3 -m venv" in p.stderr
    assert run.apt_calls()[-1].endswith("install -y --no-install-recommends python3-venv")
    # the stand-in still cannot import ensurepip: the script says so instead of going on
    assert p.returncode != 0 and "still missing after apt-get install" in p.stderr


def test_venv_mode_checks_only_python(sandbox, tmp_path):
    b, run = sandbox
    (b / "nft").unlink()
    (b / "go").unlink()
    assert run(VENV=str(tmp_path / "no-venv-yet")).returncode != 0  # all: nft, go missing
    quiet = run("venv", VENV=str(tmp_path / "no-venv-yet"), PY="_tool")
    assert (quiet.returncode, quiet.stderr) == (0, ""), quiet.stderr


IMAGE_TOOLS = ["mmdebstrap", "buildah", "runc"]


def test_default_mode_leaves_the_image_tools_alone(sandbox):
    b, run = sandbox
    assert not any((b / t).exists() for t in IMAGE_TOOLS)
    p = run()
    assert (p.returncode, p.stderr) == (0, ""), p.stderr
    assert run.apt_calls() == []


def test_images_mode_installs_buildah_mmdebstrap_runc_saying_why(sandbox):
    b, run = sandbox
    (b / "nft").unlink()  # not needed to build images: left alone
    (b / "go").unlink()
    p = run("images")
    assert p.returncode == 0, p.stderr
    for says in ("installing mmdebstrap: mmdebstrap: the images' Debian base",
                 "installing buildah: buildah: building the Dockerfiles without a Docker daemon",
                 "installing runc: runc: running the Dockerfiles' RUN steps"):
        assert says in p.stderr, p.stderr
    assert run.apt_calls()[-1].endswith("install -y --no-install-recommends mmdebstrap buildah runc")
    assert not (b / "nft").exists()
    # everything there: quiet, no apt-get
    calls = len(run.apt_calls())
    again = run("images")
    assert (again.returncode, again.stderr) == (0, ""), again.stderr
    assert len(run.apt_calls()) == calls


def test_nodes_mode_installs_containerd_cni_and_nsenter_saying_why(sandbox, tmp_path):
    b, run = sandbox
    cni = tmp_path / "cni"
    p = run("nodes", SYSTEM_DEPS_CNI_DIR=str(cni), CNI_DIR=str(cni))
    assert p.returncode == 0, p.stderr
    for says in ("installing containerd: containerd: each real node's container runtime",
                 "installing containernetworking-plugins: " + str(cni) + "/bridge: the pod network",
                 "installing iptables: iptables: the portmap CNI plugin's hostPort rules",
                 "installing util-linux: nsenter: starting each node's containerd and kubelet"):
        assert says in p.stderr, p.stderr
    assert run.apt_calls()[-1].endswith(
        "install -y --no-install-recommends containerd runc containernetworking-plugins iptables util-linux")
    assert (cni / "bridge").exists()
    calls = len(run.apt_calls())
    again = run("nodes", SYSTEM_DEPS_CNI_DIR=str(cni), CNI_DIR=str(cni))
    assert (again.returncode, again.stderr) == (0, ""), again.stderr
    assert len(run.apt_calls()) == calls

"""Per-container setup, run as the container's first program.

The node agent starts, for each container::

    ip netns exec dtj-<node> unshare --mount --uts --propagation private \\
        <venv>/bin/python -m localcluster.nodes.containerinit <spec.json>

so this runs in the node's network namespace with a private mount and UTS namespace.
It sets the hostname, bind-mounts /etc/hosts, the volumes and the termination-message
file, changes to the working directory and execs the command with a clean environment.
Mount points missing on the host are created and appended to the spec's
``created_paths_file`` (an absolute path) so that ``localcluster down`` can remove them.
That file is opened before the first mount: a volume mounted over one of its ancestors (the
chart's emptyDir on /tmp while the state dir lives under /tmp) would hide it, and the
container would fail once per path it created, a crash loop that ends only when every
mount point exists.

Spec (JSON): hostname, hosts_file, mounts [{source, target, read_only}], preserve [paths
that must stay visible; default the repository and this venv], workingDir, command [argv], env {name: value}, created_paths_file. Exit code 127 if the command is
not found, 126 if it cannot be executed, 128 on a setup error (message on stderr).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import socket
import sys

from localcluster.common.config import REPO_ROOT

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_void_p]


def bind_mount(source: str, target: str, read_only: bool = False) -> None:
    """Bind-mount ``source`` on ``target`` (recursively); remount read-only if asked.

    Raises OSError with the errno of mount(2).
    """
    if _libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount --bind {source} {target}: {os.strerror(e)}")
    if read_only:
        flags = MS_BIND | MS_REMOUNT | MS_RDONLY
        if _libc.mount(None, target.encode(), None, flags, None) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"remount ro {target}: {os.strerror(e)}")


def open_created_paths(path: str | None) -> int | None:
    """Open the created-paths file for appending (created if missing; its directory must
    exist) and return the descriptor, or None without a path. Call it before any mount, so
    that no volume can hide it. Raises ValueError for a relative path (it would depend on
    the working directory and on the mounts), OSError if it cannot be opened."""
    if not path:
        return None
    if not os.path.isabs(path):
        raise ValueError(f"created_paths_file must be absolute, got {path!r}")
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)


def _record(created_fd: int | None, path: str) -> None:
    if created_fd is not None:
        os.write(created_fd, (path + "\n").encode())  # one O_APPEND write: lines never interleave


def ensure_mount_point(target: str, is_dir: bool, created_fd: int | None) -> None:
    """Create ``target`` (directory or empty file) and missing parents on the host,
    appending every path created to the descriptor ``created_fd`` (from
    :func:`open_created_paths`; None records nothing). Raises OSError if it cannot."""
    target = os.path.normpath(target)
    missing = []
    p = target if is_dir else os.path.dirname(target)
    while p and p != "/" and not os.path.lexists(p):
        missing.append(p)
        p = os.path.dirname(p)
    for d in reversed(missing):
        try:
            os.mkdir(d)
        except FileExistsError:  # another container made it meanwhile
            continue
        _record(created_fd, d)
    if not is_dir and not os.path.lexists(target):
        try:
            fd = os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return
        os.close(fd)
        _record(created_fd, target)


def _under(parent: str, path: str) -> bool:
    parent, path = os.path.normpath(parent), os.path.normpath(path)
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def setup(spec: dict, created_fd: int | None = None) -> None:
    """Apply hostname, /etc/hosts and mounts from ``spec`` in the current namespaces,
    appending the mount points it creates on the host to ``created_fd``.

    Every mount source (and every ``preserve`` path: the project and its venv, which the
    container's programs run from) is opened with O_PATH before the first mount, and
    mounted from ``/proc/self/fd/N``: a volume mounted over an ancestor (an emptyDir on
    /tmp while the state dir lives under /tmp) cannot hide a later source. Preserved paths
    hidden by a volume are bound back at their own path. Raises OSError on failure.
    """
    if spec.get("hostname"):
        socket.sethostname(spec["hostname"])
    mounts = list(spec.get("mounts") or [])
    if spec.get("hosts_file"):
        mounts.insert(0, {"source": spec["hosts_file"], "target": "/etc/hosts", "read_only": False})
    # Parents before children, so nested mount paths land inside their parent volume.
    mounts.sort(key=lambda m: os.path.normpath(m["target"]).count("/"))
    sources = {m["source"]: (os.open(m["source"], os.O_PATH), os.path.isdir(m["source"]))
               for m in mounts}
    preserve = spec.get("preserve") or [str(REPO_ROOT), sys.prefix]  # the project, its venv
    keep = {p: os.open(p, os.O_PATH) for p in preserve if os.path.isdir(p)}
    for m in mounts:
        fd, is_dir = sources[m["source"]]
        ensure_mount_point(m["target"], is_dir, created_fd)
        bind_mount(f"/proc/self/fd/{fd}", m["target"], bool(m.get("read_only")))
    for path, fd in keep.items():
        if any(_under(m["target"], path) and os.path.normpath(m["target"]) != os.path.normpath(path)
               for m in mounts):
            ensure_mount_point(path, True, None)  # inside the volume: not a host path
            bind_mount(f"/proc/self/fd/{fd}", path)
    for fd, _ in sources.values():
        os.close(fd)
    for fd in keep.values():
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    """Set up from the spec file argv[0] and exec the command; returns an exit code only
    if that fails (126/127/128)."""
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as f:
        spec = json.load(f)
    try:
        created_fd = open_created_paths(spec.get("created_paths_file"))  # before any mount
        setup(spec, created_fd)
        wd = spec.get("workingDir")
        if wd:
            ensure_mount_point(wd, True, created_fd)
        os.chdir(wd or "/")  # as a container runtime: the image's WORKDIR defaults to /
        if created_fd is not None:
            os.close(created_fd)
    except (OSError, ValueError) as e:
        print(f"localcluster containerinit: setup failed: {e}", file=sys.stderr, flush=True)
        return 128
    cmd = spec["command"]
    env = dict(spec.get("env") or {})
    try:
        os.execvpe(cmd[0], cmd, env)
    except FileNotFoundError:
        print(f"localcluster containerinit: exec: {cmd[0]!r}: executable file not found in $PATH",
              file=sys.stderr, flush=True)
        return 127
    except OSError as e:
        print(f"localcluster containerinit: exec {cmd[0]!r}: {e}", file=sys.stderr, flush=True)
        return 126
    return 126  # not reached


if __name__ == "__main__":
    sys.exit(main())

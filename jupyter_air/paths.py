"""Where jupyter_air keeps its state (the job store, job directories, rank logs, the
pickled notebook state of each job), and keeping it private to its user.

AIR_HOME is the user's own, like ``~/.ssh``: its pickles are loaded and run, so a
directory that someone else owns or can write to is refused, and what is written
there can be read by its user only (the directory 0700, files 0600).
"""

from __future__ import annotations

import grp
import logging
import os
import pwd
import stat
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

#: File systems shared over a network: one host's shared memory (SQLite's WAL) and
#: locks do not reach the others.
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "9p",
        "fuse.sshfs",
        "lustre",
        "gpfs",
        "ceph",
        "fuse.ceph",
        "glusterfs",
        "fuse.glusterfs",
        "beegfs",
        "afs",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.rclone",
    }
)


class UnsafeHome(RuntimeError):
    """AIR_HOME is someone else's, or others could have written into it."""


def air_home() -> Path:
    """``$AIR_HOME``, else ``<jupyter data dir>/air`` (e.g. ``~/.local/share/jupyter/air``),
    created private to this user, or checked to be (see ``private_dir``)."""
    configured = os.environ.get("AIR_HOME")
    if configured:
        home = Path(configured).expanduser()
    else:
        from jupyter_core.paths import jupyter_data_dir

        home = Path(jupyter_data_dir()) / "air"
    return private_dir(home)


def private_dir(path: Path) -> Path:
    """``path``, created 0700 if missing; an existing one must be this user's and
    writable by nobody else. One that others can only read (made with the default
    umask by an earlier version) is tightened, since nothing can have been put into
    it by anyone else."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    me = os.geteuid()
    if st.st_uid != me:
        raise UnsafeHome(
            f"{path} belongs to {_user(st.st_uid)}, not to you ({_user(me)}); jupyter_air "
            f"loads and runs the pickles kept there, so it must be yours alone. If it is "
            f"yours, run `chown -R {_user(me)} {path}`; otherwise set AIR_HOME to a "
            "directory of your own."
        )
    if st.st_mode & 0o022 and not _private_group_only(st):
        raise UnsafeHome(
            f"{path} is writable by {'others' if st.st_mode & 0o002 else 'its group'} "
            f"(mode {stat.filemode(st.st_mode)}): someone else may have put files there "
            f"that jupyter_air would load and run. Check what it holds, then run "
            f"`chmod 700 {path}`."
        )
    if st.st_mode & 0o077:
        log.warning("%s was readable by other users: made private (0700)", path)
        path.chmod(0o700)
    return path


def private_opener(path: str | os.PathLike[str], flags: int) -> int:
    """``open(path, mode, opener=private_opener)``: a file created by it is 0600
    whatever the umask (an existing file keeps its mode)."""
    return os.open(path, flags, 0o600)


def write_private(path: Path, data: bytes | str) -> None:
    """``path.write_bytes``/``write_text`` for a file only its user may read."""
    with open(path, "wb", opener=private_opener) as out:
        out.write(data.encode() if isinstance(data, str) else data)


def make_private(path: Path) -> None:
    """Create ``path`` empty and 0600 if missing, else ``tighten`` it.

    An existing file is never opened here: it may be a SQLite database this process has
    open, and closing any descriptor of a file drops every POSIX lock the process holds on
    it, its connections' included; another process then takes itself for the last one
    and deletes the WAL under them ("database disk image is malformed")."""
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_RDONLY, 0o600))
    tighten(path)


def tighten(path: Path) -> None:
    """Take group and others' access from a file of this user (one an earlier version
    made with the default umask); a missing file is left missing."""
    try:
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)
    except FileNotFoundError:
        pass


def filesystem_type(path: Path) -> str:
    """The type of the file system holding ``path`` (``ext4``, ``nfs4``, ...), from the
    mount table: the mount point that is the longest prefix of the resolved path (the
    last one mounted there, on top of the others)."""
    resolved = str(path.resolve())
    best, kind = "", ""
    for part in psutil.disk_partitions(all=True):
        point = part.mountpoint.rstrip("/") + "/"
        if (resolved + "/").startswith(point) and len(point) >= len(best):
            best, kind = point, part.fstype
    return kind


def on_network_filesystem(path: Path) -> str | None:
    """The network file system type holding ``path``, None on a local disk."""
    kind = filesystem_type(path)
    return kind if kind in NETWORK_FILESYSTEMS else None


def others_can_write(st: os.stat_result) -> str | None:
    """Who else could put files into a directory with this status: ``"others"``, ``"its
    group"``, or None (its group, if writable, is its owner's personal group)."""
    if st.st_mode & 0o002:
        return "others"
    if st.st_mode & 0o020 and not _private_group_only(st):
        return "its group"
    return None


def _private_group_only(st: os.stat_result) -> bool:
    """Whether the group is its owner's personal group (Debian/Ubuntu's umask 002
    convention), so group access is the owner's access and nobody else's."""
    try:
        owner, group = pwd.getpwuid(st.st_uid), grp.getgrgid(st.st_gid)
    except KeyError:
        return False
    return (
        not st.st_mode & 0o002
        and group.gr_gid == owner.pw_gid
        and group.gr_name == owner.pw_name
        and set(group.gr_mem) <= {owner.pw_name}
    )


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"

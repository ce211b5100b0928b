"""The kernel caches' directory and file rules, in one module: the doctor opens and checks a cache directory with
them (kernelcache), and the probes that read and write AOT kernel objects load this same file by path to check each
entry (checks/smoke/dsv4probe_kernelstore.py). Standard library only, no import of the doctor: a probe runs it in
the target interpreter.

Two kinds of cache directory:
- the per-user cache: this user's, writable by nobody else; every folder above it this user's or root's (as root:
  root's only), writable by nobody else unless sticky;
- the image-wide cache (`root_only`): made by `dsv4-doctor warm` as root at image build time, then read-only for
  everyone: the directory and every entry root's, writable by nobody else; the folders above it as for the per-user
  cache (this user's or root's, writable by nobody else unless sticky). Any user, root or not, may load from it;
  nobody but root and the user running the check can change the path to it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass


class Refused(Exception):
    """A directory that is no safe cache: why, in words."""


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
MAX_LINKS = 40  # symbolic links followed on one walk (the kernel's own bound)


@dataclass
class VerifiedDir:
    """A directory opened from "/" one component at a time (openat, O_NOFOLLOW), each opened descriptor checked:
    every folder on the way is this user's or root's (as root: root's only) and writable by nobody else unless
    sticky (then nobody else can rename what is in it), and the directory itself is this user's, 0700-like
    (writable by nobody else). So nobody but this user and root can swap any part of the chain later, and the path
    keeps naming what was checked. `fd` stays open until `close`; `child` opens a file in it the same way."""

    path: str  # as given (absolute, no symlink at its end)
    fd: int
    root_only: bool = False  # the image-wide cache's rules: root's, writable by nobody else

    @property
    def fd_path(self) -> str:
        """A path that names the opened directory itself, whatever is renamed later (for this process); the path as
        given where there is no /proc."""
        return f"/proc/self/fd/{self.fd}" if os.path.isdir("/proc/self/fd") else self.path

    def child(self, name: str, limit: int = 1 << 30) -> bytes:
        """The bytes of the regular file `name` in the directory, opened through its descriptor (O_NOFOLLOW) and
        checked on the opened file (`open_entry`). Raises Refused."""
        fd = open_entry(self.fd, name, self.path, self.root_only)
        try:
            size = os.fstat(fd).st_size
            return os.read(fd, limit) if size <= limit else b""
        finally:
            os.close(fd)

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


def _owners() -> tuple[int, ...]:
    uid = os.geteuid()
    return (0,) if uid == 0 else (uid, 0)


def _owner_rule(st: os.stat_result, shown: str, own: bool, shared_ok: bool, root_only: bool = False) -> str | None:
    """Why a checked descriptor's directory or file is not safe (None when it is). `own`: it must be this user's;
    `root_only`: it must be root's (the image-wide cache, whoever reads it)."""
    uid = os.geteuid()
    owners = (0,) if root_only else (uid,) if own else _owners()
    if st.st_uid not in owners:
        who = ("root (an image-wide cache is root's)" if root_only else "this user" if own else
               "root (a cache root uses must be root's)" if uid == 0 else "this user or root")
        return f"{shown} is owned by uid {st.st_uid}, not {who} ({uid})" if not root_only else \
            f"{shown} is owned by uid {st.st_uid}, not {who}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (shared_ok and st.st_mode & stat.S_ISVTX):
        return f"{shown} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)


def open_entry(dir_fd: int, name: str, shown: str = "", root_only: bool = False) -> int:
    """A descriptor of the regular file `name` in the opened directory `dir_fd` (O_NOFOLLOW: never a link), checked
    on the opened file: this user's or root's (`root_only`: root's), writable by nobody else. The caller closes it.
    Raises Refused."""
    if not name or "/" in name or name in (".", ".."):
        raise Refused(f"{name!r} is not a file name")
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise Refused(f"cannot open {name}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"{name} is not a regular file")
        why = _owner_rule(st, f"{shown}/{name}" if shown else name, own=False, shared_ok=False, root_only=root_only)
        if why:
            raise Refused(why)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_verified(path: str | os.PathLike, create: bool = False, root_only: bool = False) -> VerifiedDir:
    """The directory `path` (absolute), opened and checked as VerifiedDir says; with `create`, missing components
    are made (mode 0700) on the way; `root_only`: the image-wide cache's rules (the directory root's, not this
    user's). Raises Refused (why), never another error."""
    text = os.fspath(path)
    if not os.path.isabs(text):
        raise Refused(f"{text} is not an absolute path")
    chain: list[tuple[int, str]] = []
    try:
        root = os.open("/", _DIR_FLAGS)
        chain.append((root, "/"))
        why = _owner_rule(os.fstat(root), "/", own=False, shared_ok=True)
        if why:
            raise Refused(why)
        pending = [c for c in reversed(text.split("/")) if c and c != "."]
        links = 0
        while pending:
            name = pending.pop()
            last = not pending
            if name == "..":
                if len(chain) > 1:
                    os.close(chain.pop()[0])
                continue
            here, shown = chain[-1]
            shown = os.path.join(shown, name)
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=here)
            except FileNotFoundError:
                if not create:
                    raise Refused(f"{shown} does not exist") from None
                with contextlib.suppress(FileExistsError):  # another rank made it first: checked below
                    os.mkdir(name, 0o755 if root_only else 0o700, dir_fd=here)
                try:
                    fd = os.open(name, _DIR_FLAGS, dir_fd=here)
                except OSError as exc:
                    raise Refused(f"cannot open {shown}: {exc.strerror or exc}") from None
            except OSError as exc:  # ELOOP / ENOTDIR: a symbolic link, or no directory
                try:
                    lst = os.stat(name, dir_fd=here, follow_symlinks=False)
                except OSError:
                    raise Refused(f"cannot open {shown}: {exc.strerror or exc}") from None
                if not stat.S_ISLNK(lst.st_mode):
                    raise Refused(f"{shown} is not a directory") from None
                links += 1
                if last or links > MAX_LINKS:
                    raise Refused(f"{shown} is a symlink") from None
                # The link is in a folder already checked (nobody else can replace it): its target is walked and
                # checked as the rest.
                target = os.readlink(name, dir_fd=here)
                if target.startswith("/"):
                    while len(chain) > 1:
                        os.close(chain.pop()[0])
                pending.extend(c for c in reversed(target.split("/")) if c and c != ".")
                continue
            chain.append((fd, shown))
            why = _owner_rule(os.fstat(fd), shown, own=last and not root_only, shared_ok=not last,
                              root_only=last and root_only)
            if why:
                raise Refused(why)
        fd, _ = chain.pop()
        return VerifiedDir(text, fd, root_only)
    except OSError as exc:
        raise Refused(f"cannot open {text}: {exc.strerror or exc}") from None
    finally:
        for fd, _ in chain:
            with contextlib.suppress(OSError):
                os.close(fd)

"""A persistent CuTe DSL kernel cache for the probes, in a per-user 0700 directory.

The CuTe DSL (nvidia-cutlass-dsl, `cutlass/base_dsl`) writes each compiled module to `CUTE_DSL_CACHE_DIR` as
`cute_dsl_<module hash>.mlir` (atomic: a temporary directory per writer, then `os.replace`) and reads it back on the
next first call. Its default directory is `$TMPDIR/$USER/cutlass_python_cache` (4.5.2 `cache_helpers.py`), which a
container's fresh /tmp loses, and its module hash includes every `CUTE_DSL_*` setting, the dump folder among them
(default: the current directory), so a run from another directory misses. The doctor therefore gives its probes one
fixed directory for both, in the user's cache home, created and checked here:

- opened, not looked up (`open_verified`): from "/", one component at a time with openat and O_NOFOLLOW, each
  opened descriptor checked, missing folders made 0700. Refused (no cache, a note) when the directory is a symlink,
  not a directory, not this user's, or writable by group or others, or when a folder above it is owned by anyone
  but this user or root (as root: root only) or writable by others without the sticky bit: nobody else can rename
  or replace the chain after the check. A symlink above it is followed only from a checked folder, its target
  checked the same way. The AOT kernel cache uses the same rules (`open_verified`, `VerifiedDir`);
- loaded through the opened descriptor: held as descriptor PROBE_FD (211) and handed to each probe (pass_fds),
  whose CuTe DSL folder is then `/proc/self/fd/211`: the checked directory whatever is renamed later, the same
  string on every run (the DSL hashes it into its keys). docs/security.md, "The kernel cache";
- bounded (the oldest files removed first past the size limit; another rank may prune at the same time);
- off with `DSV4_DOCTOR_KERNEL_CACHE=off` (or `--no-kernel-cache`); a path there chooses the directory; a
  `CUTE_DSL_CACHE_DIR` the user set is used as it is and never pruned.

A cached kernel only skips the compile: every sub-run still calls it and compares its numbers with the reference.
It cannot serve a kernel compiled with `cute.compile` (every CuTe DSL kernel of this stack): docs/smoke.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

ENV = "DSV4_DOCTOR_KERNEL_CACHE"
SIZE_ENV = "DSV4_DOCTOR_KERNEL_CACHE_MIB"
DEFAULT_LIMIT_MIB = 1024
PRUNE_TO = 0.8  # of the limit, so that a run near the limit does not prune at every start
MAX_FILES_SCANNED = 20000
OFF = frozenset({"0", "off", "no", "false", "none", "disable", "disabled"})
PROBE_FD = 211  # the checked directory's descriptor in the doctor and in every probe (a fixed number: a stable path)
PROBE_PATH = f"/proc/self/fd/{PROBE_FD}"


@dataclass
class KernelCache:
    directory: str | None  # None: the probes get no cache directory from the doctor
    source: str  # "doctor", "user" (CUTE_DSL_CACHE_DIR was set), "off", "refused"
    note: str = ""
    size_bytes: int = 0
    files: int = 0
    pruned_files: int = 0
    env: dict[str, str] = field(default_factory=dict)  # what the probes' environment gets
    fd: int | None = None  # PROBE_FD while the doctor holds the checked directory open for its probes
    path_env: dict[str, str] | None = None  # `env` by path: for a child that does not get the descriptor
    held_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the directory held at `fd`

    def holds(self) -> bool:
        """Whether `fd` still is this decision's directory in this process (a later prepare or a test may have
        closed or replaced it): only then does a probe get the descriptor, else the path."""
        try:
            st = os.fstat(self.fd) if self.fd is not None and _HELD == self.fd else None
        except OSError:
            return False
        return st is not None and (st.st_dev, st.st_ino) == self.held_id

    def env_for(self, with_fd: bool) -> dict[str, str]:
        """What a child's environment gets: `env` for one started with `pass_fds`, else the path itself."""
        return dict(self.env if (with_fd and self.holds()) or self.path_env is None else self.path_env)

    @property
    def pass_fds(self) -> tuple[int, ...]:
        """The descriptor a probe must get (Popen pass_fds) for `env` to name the checked directory."""
        return (self.fd,) if self.fd is not None and self.holds() else ()

    def evidence(self) -> dict:
        return {"directory": self.directory, "source": self.source, "note": self.note, "size_bytes": self.size_bytes,
                "files": self.files, "pruned_files": self.pruned_files,
                "probes_open_it_as": self.env.get("CUTE_DSL_CACHE_DIR") if self.source == "doctor" else None}


def default_directory(environ) -> Path:
    base = environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "dsv4-doctor" / "cute-dsl"


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

    @property
    def fd_path(self) -> str:
        """A path that names the opened directory itself, whatever is renamed later (for this process); the path as
        given where there is no /proc."""
        return f"/proc/self/fd/{self.fd}" if os.path.isdir("/proc/self/fd") else self.path

    def child(self, name: str, limit: int = 1 << 30) -> bytes:
        """The bytes of the regular file `name` in the directory, opened through its descriptor (O_NOFOLLOW) and
        checked on the opened file: this user's or root's, writable by nobody else. Raises Refused."""
        if not name or "/" in name or name in (".", ".."):
            raise Refused(f"{name!r} is not a file name")
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(name, flags, dir_fd=self.fd)
        except OSError as exc:
            raise Refused(f"cannot open {name}: {exc.strerror or exc}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise Refused(f"{name} is not a regular file")
            why = _owner_rule(st, f"{self.path}/{name}", own=False, shared_ok=False)
            if why:
                raise Refused(why)
            return os.read(fd, limit) if st.st_size <= limit else b""
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


def _owner_rule(st: os.stat_result, shown: str, own: bool, shared_ok: bool) -> str | None:
    """Why a checked descriptor's directory or file is not safe (None when it is)."""
    uid = os.geteuid()
    owners = (uid,) if own else _owners()
    if st.st_uid not in owners:
        who = "this user" if own else ("root (a cache root uses must be root's)" if uid == 0 else
                                        "this user or root")
        return f"{shown} is owned by uid {st.st_uid}, not {who} ({uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (shared_ok and st.st_mode & stat.S_ISVTX):
        return f"{shown} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def open_verified(path: str | Path, create: bool = False) -> VerifiedDir:
    """The directory `path` (absolute), opened and checked as VerifiedDir says; with `create`, missing components
    are made (mode 0700) on the way. Raises Refused (why), never another error."""
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
                    os.mkdir(name, 0o700, dir_fd=here)
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
            why = _owner_rule(os.fstat(fd), shown, own=last, shared_ok=not last)
            if why:
                raise Refused(why)
        fd, _ = chain.pop()
        return VerifiedDir(text, fd)
    except OSError as exc:
        raise Refused(f"cannot open {text}: {exc.strerror or exc}") from None
    finally:
        for fd, _ in chain:
            with contextlib.suppress(OSError):
                os.close(fd)


def ensure_directory(path: Path) -> str | None:
    """Create `path` (and its missing parents) with mode 0700; None when it is safe to use, else why not."""
    try:
        open_verified(path, create=True).close()
    except Refused as exc:
        return str(exc)
    return None


def _files(path: Path) -> list[tuple[float, int, str]]:
    """(mtime, size, path) of the regular files under `path`, symlinks not followed, at most MAX_FILES_SCANNED."""
    found: list[tuple[float, int, str]] = []
    stack = [str(path)]
    while stack and len(found) < MAX_FILES_SCANNED:
        top = stack.pop()
        try:
            with os.scandir(top) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            st = entry.stat(follow_symlinks=False)
                            found.append((st.st_mtime, st.st_size, entry.path))
                    except OSError:
                        continue
        except OSError:
            continue
    return found


def prune(path: Path, limit_bytes: int) -> tuple[int, int, int]:
    """Remove the oldest files until the total is at most PRUNE_TO of the limit, when it exceeds the limit.
    Returns (bytes left, files left, files removed)."""
    files = _files(path)
    total = sum(size for _, size, _ in files)
    removed = 0
    if total > limit_bytes:
        for _, size, name in sorted(files):
            if total <= limit_bytes * PRUNE_TO:
                break
            try:
                os.unlink(name)
            except FileNotFoundError:
                pass  # pruned by another rank
            except OSError:
                continue
            total -= size
            removed += 1
    return total, len(files) - removed, removed


MAX_LIMIT_MIB = 1 << 20  # 1 TiB


def _limit_mib(environ) -> int:
    """DSV4_DOCTOR_KERNEL_CACHE_MIB, clamped to 1-MAX_LIMIT_MIB; the default when it is no whole number."""
    raw = str(environ.get(SIZE_ENV) or "").strip()
    if not raw.isascii() or not raw.isdigit():
        return DEFAULT_LIMIT_MIB
    return max(1, min(MAX_LIMIT_MIB, int(raw) if len(raw) <= 12 else MAX_LIMIT_MIB))


def prepare(environ=None) -> KernelCache:
    """Decide the probes' CuTe DSL cache for this run (create, check, prune); never raises."""
    environ = os.environ if environ is None else environ
    try:
        return _prepare(environ)
    except Exception as exc:  # a home that cannot be resolved, an odd file system: run without the cache
        return KernelCache(None, "refused", f"kernel cache not set up: {type(exc).__name__}: {exc}")


def _prepare(environ) -> KernelCache:
    if environ.get("CUTE_DSL_CACHE_DIR"):
        return KernelCache(environ["CUTE_DSL_CACHE_DIR"], "user", "CUTE_DSL_CACHE_DIR is set: used as it is")
    setting = (environ.get(ENV) or "").strip()
    if setting.lower() in OFF:
        return KernelCache(None, "off", f"{ENV}={setting}: the probes get the CuTe DSL's own default")
    path = Path(setting) if setting and os.path.isabs(setting) else default_directory(environ)
    try:
        verified = open_verified(path, create=True)
    except Refused as exc:
        return KernelCache(None, "refused", f"kernel cache refused: {exc}")
    try:
        # Pruned through the opened descriptor (/proc/self/fd/N names the directory that was checked).
        size, count, removed = prune(Path(verified.fd_path), _limit_mib(environ) << 20)
        held, why = _hold(verified)
    finally:
        verified.close()
    # The probes get the opened directory as descriptor PROBE_FD and /proc/self/fd/PROBE_FD as its path: the same
    # string on every run (the DSL hashes its cache and dump folders into every module's key), naming what was
    # checked whatever is renamed later. Without it, the path itself: every folder on it is writable only by this
    # user or root (open_verified), but it is looked up again by each probe.
    where = PROBE_PATH if held is not None else str(path)
    note = "" if held is not None else f"the probes get the path, not the checked descriptor: {why}"
    env, by_path = {"CUTE_DSL_CACHE_DIR": where}, {"CUTE_DSL_CACHE_DIR": str(path)}
    if not environ.get("CUTE_DSL_DUMP_DIR"):
        env["CUTE_DSL_DUMP_DIR"] = where  # part of the DSL's module hash: fixed, so the cwd does not matter
        by_path["CUTE_DSL_DUMP_DIR"] = str(path)
    ident = (lambda st: (st.st_dev, st.st_ino))(os.fstat(held)) if held is not None else None
    return KernelCache(str(path), "doctor", note, size, count, removed, env, held, by_path, ident)


_HELD: int | None = None  # PROBE_FD, while this process holds a checked cache directory there


def _hold(verified: VerifiedDir) -> tuple[int | None, str]:
    """The checked directory as descriptor PROBE_FD of this process (close-on-exec: only pass_fds hands it on),
    or None and why not. Never takes a descriptor this process uses for something else."""
    global _HELD
    if not os.path.isdir("/proc/self/fd"):
        return None, "this system has no /proc/self/fd"
    try:
        if _HELD == PROBE_FD:  # an earlier decision's (tests, a second prepare): ours to replace
            os.dup2(verified.fd, PROBE_FD, inheritable=False)
            fd = PROBE_FD
        else:
            fd = fcntl.fcntl(verified.fd, fcntl.F_DUPFD_CLOEXEC, PROBE_FD)  # the lowest free number >= PROBE_FD
            if fd != PROBE_FD:
                os.close(fd)
                return None, f"descriptor {PROBE_FD} is in use"
        _HELD = fd
        opened, named = os.fstat(fd), os.stat(PROBE_PATH)
        if (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino):
            release()
            return None, f"{PROBE_PATH} does not name the opened directory"
    except OSError as exc:
        release()
        return None, f"cannot hold the directory open: {exc.strerror or exc}"
    return fd, ""


def release() -> None:
    """Close the descriptor held for the probes (a later `prepare` opens and checks the directory again)."""
    global _HELD
    if _HELD is not None:
        with contextlib.suppress(OSError):
            os.close(_HELD)
        _HELD = None


_RUN: KernelCache | None = None
_OFF_BY: str | None = None  # the option that switched the cache off for this process's probes (--no-kernel-cache)


_LOCK = threading.Lock()  # probes start from several threads: one decision, one held descriptor


def for_run() -> KernelCache:
    """This process's decision, made once (the probes of one run share it); again if its descriptor was let go."""
    global _RUN
    with _LOCK:
        if _RUN is None or (_RUN.fd is not None and not _RUN.holds()):
            _RUN = KernelCache(None, "off", f"{_OFF_BY}: the probes get the CuTe DSL's own default") if _OFF_BY \
                else prepare()
        return _RUN


def switch_off(by: str) -> None:
    """No cache for this process's probes (`--no-kernel-cache`), without touching os.environ: `preflight` execs
    the job with the environment it was given."""
    global _OFF_BY, _RUN
    with _LOCK:
        if _OFF_BY is None:
            _OFF_BY, _RUN = by, None
            release()


def reset() -> None:
    global _RUN, _OFF_BY
    with _LOCK:
        _RUN, _OFF_BY = None, None
        release()

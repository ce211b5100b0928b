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
The DSL's file cache cannot serve a kernel compiled with `cute.compile` (every CuTe DSL kernel of this stack); the
doctor's AOT kernel store can, at the call sites it has read (checks/smoke/dsv4probe_kernelstore.py). Its per-user
store is this same directory; its image-wide store (IMAGE_ENV, default DEFAULT_IMAGE_DIR) is root's, written only by
`dsv4-doctor warm`, checked with the `root_only` rules and held as IMAGE_FD (212), which the probes only read.
`--no-kernel-cache` (or `DSV4_DOCTOR_KERNEL_CACHE=off`) turns both stores off. docs/smoke.md, "The AOT kernel store".
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .cachedir import Refused, VerifiedDir, open_verified  # the directory rules (cachedir owns them)

ENV = "DSV4_DOCTOR_KERNEL_CACHE"
SIZE_ENV = "DSV4_DOCTOR_KERNEL_CACHE_MIB"
DEFAULT_LIMIT_MIB = 1024
PRUNE_TO = 0.8  # of the limit, so that a run near the limit does not prune at every start
MAX_FILES_SCANNED = 20000
OFF = frozenset({"0", "off", "no", "false", "none", "disable", "disabled"})
PROBE_FD = 211  # the checked directory's descriptor in the doctor and in every probe (a fixed number: a stable path)
PROBE_PATH = f"/proc/self/fd/{PROBE_FD}"
# The image-wide AOT kernel cache (`dsv4-doctor warm` at image build time): root's, read-only for everyone else.
IMAGE_ENV = "DSV4_DOCTOR_KERNEL_IMAGE_CACHE"
DEFAULT_IMAGE_DIR = "/usr/local/share/dsv4-doctor/kernels"
IMAGE_FD = 212
IMAGE_PATH = f"/proc/self/fd/{IMAGE_FD}"
# What a probe's AOT kernel store (checks/smoke/dsv4probe_kernelstore.py) reads: the per-user store (read and
# written) and the image-wide one (read only), each as /proc/self/fd/N or a path.
AOT_ENV, AOT_IMAGE_ENV = "DSV4_DOCTOR_AOT_CACHE", "DSV4_DOCTOR_AOT_IMAGE"


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
    image: str | None = None  # the image-wide AOT cache, when there is a safe one
    image_note: str = ""
    image_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the image cache held at IMAGE_FD

    def holds(self, fd: int | None = None) -> bool:
        """Whether `fd` (default: the per-user cache's) still is this decision's directory in this process (a later
        prepare or a test may have closed or replaced it): only then does a probe get the descriptor."""
        fd, ident = (self.fd, self.held_id) if fd is None else (IMAGE_FD, self.image_id)
        try:
            st = os.fstat(fd) if fd is not None and _HELD.get(fd) == fd else None
        except OSError:
            return False
        return st is not None and (st.st_dev, st.st_ino) == ident

    def env_for(self, with_fd: bool) -> dict[str, str]:
        """What a child's environment gets: `env` for one started with `pass_fds`, else the path itself (and no
        image cache, which is only ever read through its checked descriptor)."""
        env = dict(self.env if (with_fd and self.holds()) or self.path_env is None else self.path_env)
        if with_fd and self.image_id is not None and self.holds(IMAGE_FD):
            env[AOT_IMAGE_ENV] = IMAGE_PATH
        return env

    @property
    def pass_fds(self) -> tuple[int, ...]:
        """The descriptors a probe must get (Popen pass_fds) for `env` to name the checked directories."""
        user = (self.fd,) if self.fd is not None and self.holds() else ()
        return user + ((IMAGE_FD,) if self.image_id is not None and self.holds(IMAGE_FD) else ())

    def evidence(self) -> dict:
        return {"directory": self.directory, "source": self.source, "note": self.note, "size_bytes": self.size_bytes,
                "files": self.files, "pruned_files": self.pruned_files,
                "probes_open_it_as": self.env.get("CUTE_DSL_CACHE_DIR") if self.source == "doctor" else None,
                "image_cache": self.image, "image_cache_note": self.image_note}


def default_directory(environ) -> Path:
    base = environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "dsv4-doctor" / "cute-dsl"


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
    setting = (environ.get(ENV) or "").strip()
    if setting.lower() in OFF:
        return KernelCache(None, "off", f"{ENV}={setting}: the probes get the CuTe DSL's own default")
    cache = _user_cache(environ, setting)
    cache.image, cache.image_note, cache.image_id = _image_cache(environ)
    return cache


def _image_cache(environ) -> tuple[str | None, str, tuple[int, int] | None]:
    """The image-wide AOT cache (`dsv4-doctor warm`), held as IMAGE_FD: (path, note, identity), or no cache."""
    setting = (environ.get(IMAGE_ENV) or "").strip()
    if setting.lower() in OFF:
        return None, f"{IMAGE_ENV}={setting}: no image-wide kernel cache", None
    path = setting if os.path.isabs(setting) else DEFAULT_IMAGE_DIR
    if not os.path.lexists(path):
        return None, f"no image-wide kernel cache ({path} does not exist; `dsv4-doctor warm` makes it)", None
    try:
        verified = open_verified(path, root_only=True)
    except Refused as exc:
        return None, f"image-wide kernel cache refused: {exc}", None
    try:
        held, why = _hold(verified, IMAGE_FD)
    finally:
        verified.close()
    if held is None:
        return None, f"image-wide kernel cache not used: {why}", None
    st = os.fstat(held)
    return path, "", (st.st_dev, st.st_ino)


def _user_cache(environ, setting: str) -> KernelCache:
    if environ.get("CUTE_DSL_CACHE_DIR"):
        return KernelCache(environ["CUTE_DSL_CACHE_DIR"], "user", "CUTE_DSL_CACHE_DIR is set: used as it is")
    path = Path(setting) if setting and os.path.isabs(setting) else default_directory(environ)
    try:
        verified = open_verified(path, create=True)
    except Refused as exc:
        return KernelCache(None, "refused", f"kernel cache refused: {exc}")
    try:
        # Pruned through the opened descriptor (/proc/self/fd/N names the directory that was checked).
        size, count, removed = prune(Path(verified.fd_path), _limit_mib(environ) << 20)
        held, why = _hold(verified, PROBE_FD)
    finally:
        verified.close()
    # The probes get the opened directory as descriptor PROBE_FD and /proc/self/fd/PROBE_FD as its path: the same
    # string on every run (the DSL hashes its cache and dump folders into every module's key), naming what was
    # checked whatever is renamed later. Without it, the path itself: every folder on it is writable only by this
    # user or root (open_verified), but it is looked up again by each probe.
    where = PROBE_PATH if held is not None else str(path)
    note = "" if held is not None else f"the probes get the path, not the checked descriptor: {why}"
    env, by_path = {"CUTE_DSL_CACHE_DIR": where, AOT_ENV: where}, {"CUTE_DSL_CACHE_DIR": str(path), AOT_ENV: str(path)}
    if not environ.get("CUTE_DSL_DUMP_DIR"):
        env["CUTE_DSL_DUMP_DIR"] = where  # part of the DSL's module hash: fixed, so the cwd does not matter
        by_path["CUTE_DSL_DUMP_DIR"] = str(path)
    ident = (lambda st: (st.st_dev, st.st_ino))(os.fstat(held)) if held is not None else None
    return KernelCache(str(path), "doctor", note, size, count, removed, env, held, by_path, ident)


_HELD: dict[int, int] = {}  # PROBE_FD / IMAGE_FD -> itself, while this process holds a checked directory there


def _hold(verified: VerifiedDir, number: int) -> tuple[int | None, str]:
    """The checked directory as descriptor `number` of this process (close-on-exec: only pass_fds hands it on),
    or None and why not. Never takes a descriptor this process uses for something else."""
    if not os.path.isdir("/proc/self/fd"):
        return None, "this system has no /proc/self/fd"
    try:
        if _HELD.get(number) == number:  # an earlier decision's (tests, a second prepare): ours to replace
            os.dup2(verified.fd, number, inheritable=False)
            fd = number
        else:
            fd = fcntl.fcntl(verified.fd, fcntl.F_DUPFD_CLOEXEC, number)  # the lowest free number >= number
            if fd != number:
                os.close(fd)
                return None, f"descriptor {number} is in use"
        _HELD[number] = fd
        opened, named = os.fstat(fd), os.stat(f"/proc/self/fd/{number}")
        if (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino):
            release(number)
            return None, f"/proc/self/fd/{number} does not name the opened directory"
    except OSError as exc:
        release(number)
        return None, f"cannot hold the directory open: {exc.strerror or exc}"
    return fd, ""


def release(number: int | None = None) -> None:
    """Close the descriptors held for the probes (a later `prepare` opens and checks the directory again)."""
    for held in [number] if number is not None else list(_HELD):
        fd = _HELD.pop(held, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


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


def hold_for_warm(verified: VerifiedDir) -> KernelCache:
    """`dsv4-doctor warm`: the probes of this process get the image-wide store `verified` (opened and checked with
    the root_only rules) as IMAGE_FD, and no per-user cache."""
    global _RUN
    with _LOCK:
        release()
        held, why = _hold(verified, IMAGE_FD)
        if held is None:
            raise Refused(why)
        st = os.fstat(held)
        _RUN = KernelCache(None, "off", "dsv4-doctor warm: the image-wide store only", image=verified.path,
                           image_id=(st.st_dev, st.st_ino))
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

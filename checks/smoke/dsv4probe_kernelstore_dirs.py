"""The AOT kernel store's folders (dsv4probe_kernelstore): the per-user cache (the directory the doctor opened and
checked, handed over as descriptor 211) is read and written; the image-wide one (`dsv4-doctor warm`, descriptor 212,
root's) is only read. Every entry is opened through its directory's descriptor and checked by the doctor's own rules
(doctor/kernels/cachedir.py, loaded by path); `load_module` then reads /proc/self/fd/N of that opened file, so what
was checked is what is loaded.

A part of the kernel store, loaded by path (dsv4probe_common.load_module). Standard library only.
"""

import importlib.util
import os
import sys

AOT_ENV, AOT_IMAGE_ENV, AOT_WRITE_IMAGE_ENV = "DSV4_DOCTOR_AOT_CACHE", "DSV4_DOCTOR_AOT_IMAGE", "DSV4_DOCTOR_AOT_WARM"
MAX_OBJECT_BYTES = 64 << 20


def _cachedir():
    """doctor/kernels/cachedir.py, the one module with the cache directories' rules, loaded by path (the probe
    directory's parent), under a name nothing else uses."""
    name = "dsv4_doctor_cachedir"
    if name in sys.modules:
        return sys.modules[name]
    from dsv4probe_common import LIB, run_spec  # the doctor's probe folder (in sys.modules: the probe loaded it)

    return run_spec(name, importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(LIB),
                                                                                    "kernels/cachedir.py")))


def _fd_of(value):
    """N for "/proc/self/fd/N" (a directory the doctor opened and checked), else None."""
    prefix = "/proc/self/fd/"
    if value and value.startswith(prefix) and value[len(prefix):].isdigit():
        return int(value[len(prefix):])
    return None


class Store:
    """The directories this probe reads kernels from (image first) and the one it writes to."""

    def __init__(self, environ=None):
        environ = os.environ if environ is None else environ
        self.read = []  # (label, dir fd, root_only)
        self.write = None  # (label, dir fd, root_only)
        self.note = ""
        warm = environ.get(AOT_WRITE_IMAGE_ENV) == "1"
        image = _fd_of(environ.get(AOT_IMAGE_ENV))
        if image is not None and _is_dir(image):
            self.read.append(("image", image, True))
            if warm:
                self.write = ("image", image, True)
        user = environ.get(AOT_ENV)
        fd = _fd_of(user)
        if fd is None and user and os.path.isabs(user):
            try:  # a path (no descriptor was handed over): opened and checked here, by the same rules
                fd = _cachedir().open_verified(user).fd
            except Exception as exc:
                self.note = "per-user kernel store not used: %s" % exc
                fd = None
        if fd is not None and _is_dir(fd) and not warm:
            self.read.append(("user", fd, False))
            self.write = ("user", fd, False)

    def load(self, name, function_name):
        """(the loaded function, where) from the first store holding `name`, or (None, why not)."""
        rules = _cachedir()
        why = "not stored yet"
        for label, dir_fd, root_only in self.read:
            try:
                fd = rules.open_entry(dir_fd, name, label, root_only)
            except rules.Refused as exc:
                if "No such file" not in str(exc):
                    why = "%s store: %s" % (label, exc)
                continue
            try:
                if os.fstat(fd).st_size > MAX_OBJECT_BYTES:
                    why = "%s store: %s is too large" % (label, name)
                    continue
                from cutlass.cute.runtime import load_module

                module = load_module("/proc/self/fd/%d" % fd, enable_tvm_ffi=True)
                return getattr(module, function_name), label
            except Exception as exc:
                why = "%s store: loading %s failed: %s: %s" % (label, name, type(exc).__name__, str(exc)[:200])
            finally:
                os.close(fd)
        return None, why

    def has(self, name):
        """Whether a store this probe reads holds `name` as the rules accept it (the entry is not loaded)."""
        rules = _cachedir()
        for label, dir_fd, root_only in self.read:
            try:
                os.close(rules.open_entry(dir_fd, name, label, root_only))
                return True
            except rules.Refused:
                continue
        return False

    def save(self, compiled, name, function_name, recipe=None):
        """Export `compiled` into the writable store (a temporary name, then renamed: atomic for concurrent
        writers), with its recipe beside it (`dsv4-doctor warm`); None when stored, else why not."""
        if self.write is None:
            return "no writable kernel store"
        label, dir_fd, root_only = self.write
        tmp = ".tmp-%d-%s-%s" % (os.getpid(), os.urandom(4).hex(), name)
        if recipe is not None:
            self._write_recipe(recipe, name[:-2] + ".recipe.json", dir_fd, root_only)
        try:
            compiled.export_to_c("/proc/self/fd/%d/%s" % (dir_fd, tmp), function_name)
            os.chmod(tmp, 0o644 if root_only else 0o600, dir_fd=dir_fd)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return None
        except Exception as exc:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            return "%s store: %s: %s" % (label, type(exc).__name__, str(exc)[:200])


    @staticmethod
    def _write_recipe(recipe, name, dir_fd, root_only):
        import json

        tmp = ".tmp-%d-%s-%s" % (os.getpid(), os.urandom(4).hex(), name)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                         0o644 if root_only else 0o600, dir_fd=dir_fd)
            with os.fdopen(fd, "w") as fh:
                json.dump(recipe, fh, sort_keys=True)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except Exception:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass


def _is_dir(fd):
    try:
        import stat

        return stat.S_ISDIR(os.fstat(fd).st_mode)
    except OSError:
        return False

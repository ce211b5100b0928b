"""The probes' one read path: every file a probe reads that the doctor does not write itself (METADATA, RECORD,
sources, .pth files, git's files, verl's constants_ppo.py, shared objects, a child's answer) goes through these.

Opened with O_NONBLOCK (a FIFO with no writer opens at once instead of waiting for one, and is then refused, as a FIFO
whose writer never closes it is), checked on the opened descriptor, at most `limit` bytes. What a decoder raises on
hostile bytes (a 100,000-deep nest: RecursionError or MemoryError, by Python version and shape; bad UTF-8; bad syntax)
is one ReadRefused with a reason a person can act on. doctor/hostio/safeio.py is the doctor's own copy of these rules.

Loaded by dsv4probe_common (load_module, by path) and re-exported there: a probe imports these from dsv4probe_common.
Stdlib only, Python 3.8+, and nothing else of the probes: the reasons hold no text of the file read (an OS error's
name, a decoder's position and type), so they are cut plainly.
"""

import ast
import json
import os
import stat


def _one_line(text, limit):
    """At most `limit` characters of one line of `text`."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:max(0, limit - 1)].rstrip() + "…"


ANSWER_LIMIT = 32 << 20  # a child's answer that a probe reads: what the doctor allows a probe's (MAX_ANSWER_BYTES)


class ReadRefused(OSError):
    """A file that is not read, or whose text is not decoded: its reason, in words ("it is a FIFO, not a regular
    file"). An OSError, so every caller that already handles an unreadable file handles this too. A decoder's
    refusal also says what the decoder raised (`cause`: "SyntaxError: invalid syntax (x.py, line 3)")."""

    cause = None


def _not_decoded(reason, exc):
    refused = ReadRefused(reason)
    refused.cause = "%s: %s" % (type(exc).__name__, _one_line(str(exc), 300) or "(no message)")
    return refused


def _file_kind(mode):
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISFIFO, "a FIFO")):
        if test(mode):
            return name
    return "something else"


def _open_regular_fd(path, follow_links):
    """(a descriptor of the regular file at `path`, its fstat), never blocking; ReadRefused otherwise."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError) as exc:  # ValueError: a path with a NUL byte
        raise ReadRefused(getattr(exc, "strerror", None) or str(exc)) from None
    try:
        info = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise ReadRefused(exc.strerror or str(exc)) from None
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ReadRefused("it is %s, not a regular file" % _file_kind(info.st_mode))
    return fd, info


def open_regular(path, follow_links=True):
    """A binary file object of the regular file at `path`, for a reader that seeks (a shared object's sections);
    the caller closes it and bounds what it reads. Raises ReadRefused (a FIFO, a device, a socket, a directory, a
    file that cannot be opened) without blocking."""
    fd, _ = _open_regular_fd(path, follow_links)
    return os.fdopen(fd, "rb")


def read_bounded(path, limit, follow_links=True):
    """(the first `limit` bytes of the regular file at `path`, its size as fstat gives it): a caller compares the
    two to know that it got the whole file. Raises ReadRefused, never blocks. The first read is sized by the file (a
    buffer of `limit` bytes for each small file made a scan of 20,000 distributions mostly page faults); a file
    whose size is 0 (/proc's) is read until its end, within `limit`."""
    fd, info = _open_regular_fd(path, follow_links)
    try:
        chunks, got = [], 0
        first = min(limit, info.st_size + 1) if info.st_size else min(limit, 1 << 16)
        while got < limit:
            asked = min(first if not got else 1 << 16, limit - got)
            chunk = os.read(fd, asked)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            if len(chunk) < asked and info.st_size and got >= info.st_size:
                break  # a regular file reads short only at its end
        return b"".join(chunks), info.st_size
    except OSError as exc:
        raise ReadRefused(exc.strerror or str(exc)) from None
    finally:
        os.close(fd)


def read_text(path, limit=1 << 20):
    """A regular file's first `limit` bytes as text (undecodable bytes replaced), "" when it is no regular file or
    cannot be read: for files whose absence and refusal mean the same (a .git's HEAD, a package_info.py, a
    top_level.txt)."""
    try:
        return read_bounded(path, limit)[0].decode("utf-8", "replace")
    except OSError:  # ReadRefused
        return ""


def read_tail(path, limit):
    """(the last `limit` bytes of the regular file at `path`, its size): a log a child wrote. Raises ReadRefused."""
    fd, info = _open_regular_fd(path, True)
    try:
        return os.pread(fd, max(0, limit), max(0, info.st_size - limit)), info.st_size
    except OSError as exc:
        raise ReadRefused(exc.strerror or str(exc)) from None
    finally:
        os.close(fd)


def decode_json(raw, errors="strict"):
    """The JSON value of `raw` (UTF-8 bytes, or text). Raises ReadRefused, whatever is wrong with it: not UTF-8,
    not JSON, a 100,000-deep nest (RecursionError), more than memory holds (MemoryError)."""
    try:
        return json.loads(raw.decode("utf-8", errors) if isinstance(raw, (bytes, bytearray)) else raw)
    except RecursionError as exc:
        raise _not_decoded("its JSON is nested too deeply to decode (RecursionError)", exc) from None
    except MemoryError as exc:
        raise _not_decoded("its JSON is too large or too deeply nested to decode (MemoryError)", exc) from None
    except UnicodeError as exc:
        raise _not_decoded("it is not UTF-8 text (%s)" % _one_line(str(exc), 200), exc) from None
    except ValueError as exc:
        raise _not_decoded("it is not JSON (%s)" % _one_line(str(exc), 200), exc) from None


def load_json(path, limit, errors="strict"):
    """The JSON value of the regular file at `path`, of at most `limit` bytes (a larger one is refused, never cut).
    Raises ReadRefused."""
    raw, size = read_bounded(path, limit + 1)
    if size > limit:
        raise ReadRefused("it is larger than %d bytes (%d bytes)" % (limit, size))
    if len(raw) > limit:  # a file whose size fstat does not know (/proc's)
        raise ReadRefused("it is larger than %d bytes" % limit)
    return decode_json(raw, errors)


def parse_python(raw, filename="<unknown>", mode="exec"):
    """ast.parse of `raw` (source bytes, or text). Raises ReadRefused, whatever is wrong with it: a syntax error, a
    100,000-deep expression (RecursionError or MemoryError, by Python version and shape), a NUL byte, text that is
    neither UTF-8 nor in the encoding its coding line names."""
    try:
        return ast.parse(raw, filename, mode)
    except SyntaxError as exc:  # IndentationError too ("too many levels of indentation")
        raise _not_decoded("it does not parse as Python (%s: %s)" % (
            type(exc).__name__, _one_line(str(exc), 300)), exc) from None
    except (RecursionError, MemoryError) as exc:
        said = _one_line(str(exc), 200)
        raise _not_decoded("its Python is nested too deeply to parse (%s%s)" % (
            type(exc).__name__, ": " + said if said else ""), exc) from None
    except UnicodeError as exc:
        raise _not_decoded("it is not text in its encoding (%s: %s)" % (
            type(exc).__name__, _one_line(str(exc), 200)), exc) from None
    except (ValueError, OverflowError) as exc:  # a NUL byte (before 3.12)
        raise _not_decoded("it does not parse as Python (%s: %s)" % (
            type(exc).__name__, _one_line(str(exc), 200)), exc) from None


METADATA_LIMIT = 1 << 22  # a distribution's METADATA: the static probe's bound


def installed_version(name):
    """The version a distribution's METADATA states (found as importlib.metadata finds it, read through
    read_bounded: a FIFO or device there never blocks), or None."""
    try:
        from importlib import metadata

        folder = getattr(metadata.distribution(name), "_path", None)
        raw, _ = read_bounded(os.path.join(str(folder), "METADATA"), METADATA_LIMIT)
    except Exception:  # not installed, no folder (an egg), unreadable
        return None
    for line in raw.decode("utf-8", "replace").splitlines():
        if not line.strip():
            break  # the headers end at the first blank line
        field, _, value = line.partition(":")
        if field.strip().lower() == "version" and value.strip():
            return value.strip()[:64]
    return None

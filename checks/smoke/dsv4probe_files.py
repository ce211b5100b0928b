"""Files of the inspected environment, read as hostile input: a log's tail (a small file is the library's read_text,
and a checkout's commit its dsv4probe_static_checkout.git_commit).

Loaded by path (dsv4probe_common.load_module) by the probe scripts beside it. Stdlib only. Every read goes through
dsv4probe_common's (bounded, never blocking).
"""

from dsv4probe_common import read_tail  # in sys.modules: the probe script loaded it


def log_tail(path, size=1500):
    """The last `size` bytes of a log a child wrote, as text; "" when it is no regular file."""
    try:
        return read_tail(path, size)[0].decode("utf-8", "backslashreplace")
    except OSError:  # ReadRefused
        return ""

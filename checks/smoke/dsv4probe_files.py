"""Files of the inspected environment, read as hostile input: a small regular file (never a FIFO or a device), a log's
tail, and the commit a git checkout's HEAD names (read from its files; git is never run).

Loaded by path (dsv4probe_common.load_module) by the probe scripts beside it. Stdlib only. Every read goes through
dsv4probe_common's (bounded, never blocking).
"""

import os
import re

from dsv4probe_common import read_bounded, read_tail  # in sys.modules: the probe script loaded it

COMMIT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


def read_small(path, limit=1 << 20):
    """A regular file's first bytes as text, "" otherwise (never blocks on a FIFO, never follows into a device)."""
    try:
        return read_bounded(path, limit)[0].decode("utf-8", "replace")
    except OSError:  # ReadRefused
        return ""


def git_head(tree):
    """The commit a checkout's HEAD names, read from its files (git is never run): .git as a folder or a `gitdir:`
    file (a submodule, such as Megatron-Bridge's 3rdparty/Megatron-LM, or a worktree), a detached HEAD or a ref in
    the folder, its common folder, or packed-refs. None when none of that gives a commit."""
    git = os.path.join(tree, ".git")
    if os.path.isfile(git):
        text = read_small(git, 4096).strip()
        if not text.startswith("gitdir:"):
            return None
        git = os.path.normpath(os.path.join(tree, text[len("gitdir:"):].strip()))
    if not os.path.isdir(git):
        return None
    head = read_small(os.path.join(git, "HEAD"), 4096).strip()
    if COMMIT.match(head):
        return head
    ref = head[len("ref:"):].strip() if head.startswith("ref:") else ""
    if not ref.startswith("refs/") or ".." in ref.split("/"):
        return None
    bases = [git]
    common = read_small(os.path.join(git, "commondir"), 4096).strip()
    if common:
        bases.append(os.path.normpath(os.path.join(git, common)))
    for base in bases:
        sha = read_small(os.path.join(base, *ref.split("/")), 4096).strip()
        if COMMIT.match(sha):
            return sha
        for line in read_small(os.path.join(base, "packed-refs")).splitlines():
            parts = line.split(" ")
            if len(parts) == 2 and parts[1] == ref and COMMIT.match(parts[0]):
                return parts[0]
    return None


def log_tail(path, size=1500):
    """The last `size` bytes of a log a child wrote, as text; "" when it is no regular file."""
    try:
        return read_tail(path, size)[0].decode("utf-8", "backslashreplace")
    except OSError:  # ReadRefused
        return ""

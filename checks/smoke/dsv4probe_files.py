"""Files of the inspected environment, read as hostile input: a small regular file (never a FIFO or a device), a log's
tail, and the commit a git checkout's HEAD names (read from its files; git is never run).

Loaded by path (dsv4probe_common.load_module) by the probe scripts beside it. Stdlib only.
"""

import os
import re
import stat

COMMIT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


def read_small(path, limit=1 << 20):
    """A regular file's first bytes as text, "" otherwise (never blocks on a FIFO, never follows into a device)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return os.read(fd, limit).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


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
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - size))
            return fh.read().decode("utf-8", "backslashreplace")
    except OSError:
        return ""

"""A copy no distribution owns (a checkout on the job's path) judged by its files: the version its package_info.py
or __version__ states (read with ast), and the git commit its .git holds (HEAD, refs and packed-refs read as files;
git itself is not run).

A part of the static probe (dsv4probe_static.py), loaded by path (dsv4probe_common.load_module).
"""

import ast
import os
import re

from dsv4probe_common import parse_python, read_text  # in sys.modules: the probe loaded it first


def _real(path):
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return path


_VERSION_NAMES = ("__version__", "MAJOR", "MINOR", "PATCH", "PRE_RELEASE", "version")


def files_version(folder):
    """A package's version as its own files state it (package_info.py's MAJOR.MINOR.PATCH, or a literal
    __version__), read with ast; None when they state none."""
    for name in ("package_info.py", "version.py", "_version.py", "__init__.py"):
        text = read_text(os.path.join(folder, name), 1 << 20)
        if not text:
            continue
        try:
            tree = parse_python(text, name)
        except OSError:  # ReadRefused: it does not parse, or is nested too deeply
            continue
        values = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and node.targets[0].id in _VERSION_NAMES and isinstance(node.value, ast.Constant):
                values[node.targets[0].id] = node.value.value
        if isinstance(values.get("__version__"), str):
            return {"version": values["__version__"][:100], "file": os.path.join(folder, name)}
        if all(isinstance(values.get(k), int) for k in ("MAJOR", "MINOR", "PATCH")):
            v = "%d.%d.%d" % (values["MAJOR"], values["MINOR"], values["PATCH"])
            if isinstance(values.get("PRE_RELEASE"), str):
                v += values["PRE_RELEASE"][:20]
            return {"version": v, "file": os.path.join(folder, name)}
    return None


_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1, or SHA-256 object names


def git_commit(folder, levels=6):
    """The checkout around `folder`: {root, commit, ref}, read from .git's own files (HEAD, refs, packed-refs);
    git itself is not run. None when no .git is found or it cannot be read."""
    here = _real(folder)
    for _ in range(levels):
        dot = os.path.join(here, ".git")
        gitdir = None
        if os.path.isdir(dot):
            gitdir = dot
        elif os.path.isfile(dot):
            line = read_text(dot, 4096).strip()
            if line.startswith("gitdir:"):
                gitdir = os.path.join(here, line[len("gitdir:"):].strip())
        if gitdir:
            return _read_head(here, gitdir)
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    return None


def _read_head(root, gitdir):
    head = read_text(os.path.join(gitdir, "HEAD"), 4096).strip()
    out = {"root": root, "commit": None, "ref": None}
    if _SHA.fullmatch(head):
        out["commit"] = head
        return out
    if not head.startswith("ref:"):
        out["error"] = ".git/HEAD unreadable"
        return out
    ref = head[4:].strip()
    out["ref"] = ref[:200]
    common = gitdir
    commondir = read_text(os.path.join(gitdir, "commondir"), 4096).strip()
    if commondir:  # a worktree: its refs live in the main repository's .git
        common = os.path.join(gitdir, commondir)
    for base in (gitdir, common):
        if ".." in ref.split("/"):
            break
        value = read_text(os.path.join(base, ref), 4096).strip()
        if _SHA.fullmatch(value):
            out["commit"] = value
            return out
        for line in read_text(os.path.join(base, "packed-refs"), 1 << 22).splitlines():
            sha, _, name = line.partition(" ")
            if name.strip() == ref and _SHA.fullmatch(sha):
                out["commit"] = sha
                return out
    return out

"""A fix plan without the network: `fix --download DIR` on a connected machine fetches what the plan's pip steps
install into DIR; `fix --from DIR` (with or without `--apply`) installs from DIR alone.

- Requirements from an index (`NAME==VERSION`, with extras or a range) are fetched with the target's own pip, `pip
  download -d DIR` (with their dependencies, unless the step says `--no-deps`, and from the index the step names), and
  installed with `pip install --no-index --find-links DIR`.
- A git pin (`NAME @ git+https://HOST/OWNER/REPO.git@COMMIT`: Megatron-LM dev, Megatron-Bridge, FlashMLA nv_dev,
  fast-hadamard-transform) is fetched with git at that commit, its submodules with it (FlashMLA's csrc/cutlass holds
  the CUTLASS headers its build includes), and kept as an archive of the tree without `.git`,
  `DIR/git/NAME-COMMIT.tar.gz`; `--from` installs `NAME @ file:///DIR/git/NAME-COMMIT.tar.gz`. The build requirements
  its pyproject.toml declares (`[build-system] requires`) are fetched into DIR too: pip's isolated build installs them
  from there.
- A step whose artifact DIR lacks keeps its command (so the script shows what it needs) and a note naming what is
  missing; `--apply --from` fails that step with that note and goes on (fix/apply.py).

Every command is an argv list with a wall-clock limit and its output bounded (fix/runner.py); nothing read from DIR
becomes a command word except the file names the doctor itself chose.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .steps import Command, Fix

if TYPE_CHECKING:
    from .plan import Plan

GIT_FOLDER = "git"  # DIR/git: the archives of the git pins (pip's --find-links does not look into sub-folders)
PIP_TIMEOUT_S = 1800.0  # one `pip download`
GIT_TIMEOUT_S = 1800.0  # one git fetch or submodule update (Megatron-LM is large)
MAX_LISTED = 20000  # entries of DIR looked at: a huge folder is not read to its end
# pip install's options that take a value (the next word), as the catalogue and plugins write them
VALUE_OPTIONS = ("-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-t", "--target", "--prefix",
                 "--root", "-c", "--constraint", "-r", "--requirement", "--python", "--platform", "--python-version",
                 "--implementation", "--abi", "--no-binary", "--only-binary", "--progress-bar")
INDEX_OPTIONS = ("-i", "--index-url", "--extra-index-url", "-f", "--find-links")  # what --from replaces
DOWNLOAD_FLAGS = ("--no-deps", "--pre")  # what pip download keeps of a step's flags
GIT_PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,99})\s*@\s*git\+(?P<url>https://[A-Za-z0-9._/-]{1,300})"
                     r"@(?P<commit>[0-9a-f]{40})")


@dataclass(frozen=True)
class GitPin:
    """`NAME @ git+URL@COMMIT`, a full commit: the archive `--download` makes of it and `--from` installs."""

    name: str
    url: str
    commit: str

    @property
    def archive(self) -> str:
        return f"{canonicalize_name(self.name)}-{self.commit}.tar.gz"


def git_pin(word: str) -> GitPin | None:
    m = GIT_PIN.fullmatch(word.strip())
    return GitPin(m["name"], m["url"], m["commit"]) if m else None


def split_install(cmd: Command) -> tuple[list[str], list[str]] | None:
    """A `pip install` command's (options with their values, requirement words), or None for any other command."""
    if not cmd.is_pip or len(cmd.argv) < 2 or cmd.argv[1] != "install":
        return None
    options, reqs = [], []
    words = list(cmd.argv[2:])
    while words:
        word = words.pop(0)
        if word in VALUE_OPTIONS and words:
            options += [word, words.pop(0)]
        elif word.startswith("-"):
            options.append(word)
        else:
            reqs.append(word)
    return options, reqs


# ------------------------------------------------------------------------------------------------ --from DIR

def listing(folder: str) -> list[str]:
    """The names of the regular files (or links to one) in `folder`, at most MAX_LISTED; odd names are names."""
    names = []
    try:
        with os.scandir(folder) as entries:
            for n, entry in enumerate(entries):
                if n >= MAX_LISTED:
                    break
                try:
                    if entry.is_file():  # a dangling link, a folder or a FIFO is no artifact
                        names.append(entry.name)
                except OSError:
                    continue
    except OSError:
        return []
    return names


def _name_version(filename: str) -> tuple[str, str] | None:
    """A wheel's or an sdist's (name, version) by its file name, or None."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        return (parts[0], parts[1]) if len(parts) >= 5 else None
    for ext in (".tar.gz", ".zip", ".tar.bz2", ".tgz"):
        if filename.endswith(ext):
            name, _, ver = filename[: -len(ext)].rpartition("-")
            return (name, ver) if name and ver else None
    return None


def has_artifact(requirement: str, names: Sequence[str]) -> bool:
    """Whether a file in `names` is a distribution of `requirement` whose version its specifier allows."""
    try:
        req = Requirement(requirement)
    except InvalidRequirement:
        return True  # not a requirement the doctor can read: pip says what it makes of it
    want = canonicalize_name(req.name)
    for filename in names:
        got = _name_version(filename)
        if got is None or canonicalize_name(got[0]) != want:
            continue
        try:
            if req.specifier.contains(Version(got[1]), prereleases=True):
                return True
        except InvalidVersion:
            continue
    return False


def offline_command(cmd: Command, folder: str, names: Sequence[str], git_names: Sequence[str]) -> \
        tuple[Command, list[str]]:
    """`cmd` as it installs from `folder` alone, and what of it `folder` lacks (one phrase each)."""
    split = split_install(cmd)
    if split is None:
        return cmd, []
    options, reqs = split
    kept: list[str] = []
    skip_next = False
    for word in options:
        if skip_next:
            skip_next = False
        elif word in INDEX_OPTIONS:
            skip_next = True
        elif word != "--no-index" and not word.startswith(tuple(o + "=" for o in INDEX_OPTIONS if o.startswith("--"))):
            kept.append(word)
    missing, words = [], []
    for word in reqs:
        pin = git_pin(word)
        if pin is not None:
            path = os.path.join(folder, GIT_FOLDER, pin.archive)
            words.append(f"{pin.name} @ {Path(path).as_uri()}")
            if pin.archive not in git_names:
                missing.append(f"{GIT_FOLDER}/{pin.archive} (the archive of {pin.url} at {pin.commit[:12]})")
        else:
            words.append(word)
            if not has_artifact(word, names):
                missing.append(f"a wheel or sdist of {word}")
    argv = (cmd.argv[0], "install", "--no-index", "--find-links", folder, *kept, *words)
    return Command(argv, cmd.env), missing


def from_folder(plan: Plan, folder: str) -> Plan:
    """The plan as it installs from `folder` alone (`fix --from DIR`): each pip install with `--no-index
    --find-links DIR`, each git pin from its archive; a step whose artifacts are missing says which (Step.missing
    and a note the script prints)."""
    folder = os.path.abspath(folder)
    names, git_names = listing(folder), listing(os.path.join(folder, GIT_FOLDER))
    steps = []
    for step in plan.steps:
        commands, missing = [], []
        for cmd in step.commands:
            new, lacks = offline_command(cmd, folder, names, git_names)
            commands.append(new)
            missing += lacks
        fix = step.fix
        if missing:
            said = f"NOT IN {folder}: " + "; ".join(missing) + " (`dsv4-doctor fix --download DIR` on a connected " \
                "machine fetches it)"
            fix = Fix(fix.description, fix.commands, key=fix.key, phase=fix.phase, manual=fix.manual,
                      notes=(*fix.notes, said), action=dict(fix.action), installer=fix.installer)
        steps.append(replace(step, fix=fix, commands=commands, missing="; ".join(missing)))
    return replace(plan, steps=steps)


# ------------------------------------------------------------------------------------------------ --download DIR

@dataclass
class Fetched:
    files: list[str]  # what was fetched (file names under DIR, git/ included)
    failed: list[str]  # what could not be, each with its error
    left: list[str]  # what --download leaves to a person (the manual steps), each with why


def download_argv(python: str, folder: str, options: Sequence[str], reqs: Sequence[str]) -> list[str]:
    """`pip download -d DIR` of `reqs`, with the step's index and --no-deps/--pre: the target's own pip picks the
    files its interpreter installs."""
    keep: list[str] = []
    words = list(options)
    while words:
        word = words.pop(0)
        if word in INDEX_OPTIONS and words:
            keep += [word, words.pop(0)]
        elif word in DOWNLOAD_FLAGS:
            keep.append(word)
    return [python, "-I", "-m", "pip", "download", "--disable-pip-version-check", "-d", folder, *keep, *reqs]


def download(plan: Plan, python: str, folder: str, run: Callable[[Sequence[str], float, str | None], object],
             say: Callable[[str], None]) -> Fetched:
    """Fetch into `folder` what every pip step that is not manual installs. `run(argv, timeout, cwd)` runs one
    command and returns a fix.runner.Ran."""
    folder = os.path.abspath(folder)
    os.makedirs(os.path.join(folder, GIT_FOLDER), exist_ok=True)
    before = set(listing(folder)) | {f"{GIT_FOLDER}/{n}" for n in listing(os.path.join(folder, GIT_FOLDER))}
    out = Fetched([], [], [])
    for n, step in enumerate(plan.steps, 1):
        installs = [s for s in (split_install(c) for c in step.commands) if s is not None]
        if not installs:
            continue
        if step.fix.manual:
            out.left.append(f"step {n} (manual) is not fetched: " + "; ".join(  # quoted: pasted into a shell
                shlex.join(download_argv("python", "DIR", o, r)[1:]) for o, r in installs) + ", if you take it")
            continue
        for options, reqs in installs:
            pins = [p for p in (git_pin(w) for w in reqs) if p is not None]
            plain = [w for w in reqs if git_pin(w) is None]
            if plain:
                say(f"step {n}: pip download {' '.join(plain)}")
                ran = run(download_argv(python, folder, options, plain), PIP_TIMEOUT_S, None)
                if getattr(ran, "code", 1) != 0:
                    out.failed.append(f"step {n}: {' '.join(plain)}: {ran.error(PIP_TIMEOUT_S)}")  # type: ignore
            for pin in pins:
                say(f"step {n}: git {pin.url} at {pin.commit[:12]}, with its submodules")
                error = fetch_git(pin, folder, run, python)
                if error:
                    out.failed.append(f"step {n}: {pin.url}@{pin.commit[:12]}: {error}")
    after = set(listing(folder)) | {f"{GIT_FOLDER}/{n}" for n in listing(os.path.join(folder, GIT_FOLDER))}
    out.files = sorted(after - before) or []
    return out


def fetch_git(pin: GitPin, folder: str, run, python: str) -> str | None:
    """Make DIR/git/NAME-COMMIT.tar.gz of the tree at the pin's commit with its submodules (no `.git`), and fetch
    its build requirements into DIR; the error, or None."""
    work = tempfile.mkdtemp(prefix="dsv4-doctor-git-")
    try:
        tree = os.path.join(work, "src")

        def git(*args: str, where: str | None = tree):
            return run(["git", *args], GIT_TIMEOUT_S, where)

        steps = [("init", "-q", tree), ("remote", "add", "origin", pin.url)]
        for args in steps:
            ran = git(*args, where=work if args[0] == "init" else tree)
            if ran.code != 0:
                return f"git {args[0]}: {ran.error(GIT_TIMEOUT_S)}"
        ran = git("fetch", "-q", "--depth", "1", "origin", pin.commit)
        if ran.code != 0:  # a server that does not serve a commit by its id: all of it, then the commit
            ran = git("fetch", "-q", "origin")
            if ran.code != 0:
                return f"git fetch: {ran.error(GIT_TIMEOUT_S)}"
        for args in (("-c", "advice.detachedHead=false", "checkout", "-q", pin.commit),
                     ("submodule", "update", "-q", "--init", "--recursive")):
            ran = git(*args)
            if ran.code != 0:
                return f"git {' '.join(args[-4:])}: {ran.error(GIT_TIMEOUT_S)}"
        target = os.path.join(folder, GIT_FOLDER, pin.archive)
        partial = target + ".partial"
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(tree, arcname=f"{canonicalize_name(pin.name)}-{pin.commit[:12]}",
                    filter=lambda info: None if ".git" in Path(info.name).parts else info)
        os.replace(partial, target)
        return build_requirements(tree, folder, run, python)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build_requirements(tree: str, folder: str, run, python: str) -> str | None:
    """Fetch what the tree's pyproject.toml declares in `[build-system] requires` (pip's isolated build installs it);
    setuptools and wheel where it declares none (pip's default for a setup.py project)."""
    from ..hostio.safeio import ReadRefused, load_toml

    path = os.path.join(tree, "pyproject.toml")
    requires: list[str] = ["setuptools>=40.8.0", "wheel"]
    if os.path.isfile(path):
        try:
            system = load_toml(path).get("build-system")
        except (ReadRefused, ValueError):
            system = None
        got = system.get("requires") if isinstance(system, dict) else None
        if isinstance(got, list):
            requires = [r for r in got if isinstance(r, str) and r.strip() and not r.startswith("-")][:50]
    if not requires:
        return None
    ran = run(download_argv(python, folder, [], requires), PIP_TIMEOUT_S, None)
    return None if getattr(ran, "code", 1) == 0 else f"its build requirements: {ran.error(PIP_TIMEOUT_S)}"

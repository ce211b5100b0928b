"""Platform: the target interpreter."""

from __future__ import annotations

import sys

from dsv4_doctor.api import (REMOTE_NOT_KNOWN, Context, Profile, Result, Source, StaticRequest, check, failed, passed,
                             same_interpreter, skipped, warned)

from .fixes import catalogue as fixes

# The stack's distributions whose Requires-Python must admit the target (pip enforces it at install, but a copied
# site-packages, a --no-deps --target install or a different interpreter on the same tree does not).
STACK = ("megatron-core", "transformer-engine", "transformer_engine", "nvidia-cudnn-frontend", "nvidia-cutlass-dsl",
         "apache-tvm-ffi", "torch", "verl", "megatron-bridge", "flash-mla")
STATIC = StaticRequest(distributions=STACK)


def _requires_python(ctx: Context, version: str, unread: list[str]) -> list[str]:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        static = ctx.static
    except Exception:  # no static facts (a target too old for the probes): the version alone decides
        return []
    out = []
    for name in STACK:
        dist = static.readable_dist(name)
        if dist is None and static.dist_copies(name):
            unread.append(name)  # installed, but no copy's METADATA could be read: its Requires-Python is not known
        spec = dist.get("requires_python") if dist else None
        if not isinstance(spec, str) or not spec.strip():
            continue
        try:
            if not SpecifierSet(spec).contains(version, prereleases=True):
                out.append(f"{dist.get('name') or name} {dist.get('version')} declares Requires-Python {spec}")
        except InvalidSpecifier:
            continue
    return out


def _externally_managed(ctx: Context) -> dict | None:
    """PEP 668 as pip sees the target (the static probe's facts): whether pip refuses a plain install into it, the
    marker and the distributor's message. Evidence only: the fix plan's installer policy acts on it
    (checks/fixes/installer.py)."""
    try:
        facts = ctx.static.installer()["externally_managed"]
    except Exception:  # no static facts: python.version judges the version alone
        return None
    keys = ("marker", "found", "in_venv", "enforced", "error", "unread", "override")
    return {k: facts[k] for k in keys} if facts["known"] else None


@check(
    "python.version",
    "Python version of the target interpreter",
    applies_when="always",
    detects="sys.version_info of the target interpreter (a handshake that runs on any Python); Requires-Python of "
            "the stack's distributions",
    sources=(
        Source("Megatron-LM dev pyproject.toml (requires-python >=3.10)",
               "https://github.com/NVIDIA/Megatron-LM/blob/dev/pyproject.toml"),
        Source("megatron-core 0.19.2 METADATA (Requires-Python >=3.12)", "https://pypi.org/project/megatron-core/0.19.2/"),
        Source("verl docker/Dockerfile.stable.vllm (Python 3.12)", "https://github.com/verl-project/verl"),
    ),
    fixes=(fixes.PYTHON_312,),
    static=STATIC,
)
def python_version(ctx: Context) -> Result:
    # The handshake runs on any Python (2.7 included), so an interpreter too old for the probes still gets a verdict.
    """Megatron-LM `dev`, the only branch with the dsv4_hybrid attention, declares `requires-python >=3.10`;
    older interpreters cannot run it (a failure). Released megatron-core wheels (0.17 and later) declare
    `Requires-Python >=3.12`, and the verl image and the NGC PyTorch containers the Megatron DSv4 recipes use
    ship Python 3.12, so 3.12 is the tested choice; 3.10 and 3.11 pass with that note. The version comes from a
    handshake that runs on any Python (2.7 too): an interpreter older than 3.8, which the doctor's probes need,
    fails here and every other check says it could not be inspected. An installed stack distribution whose
    `Requires-Python` excludes the target (a megatron-core wheel declaring >=3.12 on 3.11) is a failure too.
    """
    py = ctx.target or ctx.static.python
    info = list(py.get("version_info") or [0, 0, 0])[:3]
    version = py.get("version") or "unknown"
    evidence = {"version": version, "executable": py.get("executable"), "implementation": py.get("implementation")}
    managed = _externally_managed(ctx)
    if managed is not None:
        evidence["externally_managed"] = managed
    unread: list[str] = []
    refused = _requires_python(ctx, version, unread) if version != "unknown" else []
    if unread:
        evidence["requires_python_not_read"] = unread
    if refused:
        evidence["requires_python"] = refused
        return failed(f"Python {version} is outside what installed packages declare: " + "; ".join(refused),
                      "These distributions were installed for another interpreter (a copied site-packages, a "
                      "--target install, or a venv whose Python changed); their code may use syntax or APIs this "
                      "Python lacks.", fixes=[fixes.PYTHON_312], evidence=evidence)
    note = (f" (Requires-Python of {', '.join(unread)} not known: unreadable METADATA, see deps.metadata)"
            if unread else "")
    if (info[0], info[1]) >= (3, 12):
        return passed(f"Python {version}{note}", evidence=evidence)
    if (info[0], info[1]) >= (3, 10):
        return passed(
            f"Python {version} (Megatron-LM dev allows >= 3.10; released megatron-core wheels need 3.12){note}",
            "Megatron-LM dev, the only source of dsv4_hybrid, declares requires-python >=3.10, so a dev install runs "
            "here. Released megatron-core wheels (>= 0.17) declare >=3.12, and the reference DSv4 images ship 3.12.",
            evidence=evidence)
    return failed(f"Python {version} is older than 3.10, the oldest Megatron-LM dev supports",
                  fixes=[fixes.PYTHON_312], evidence=evidence)

def _job_given(profile: Profile) -> str | None:
    return None if profile.job is not None else "no job arguments (preflight or --job-args)"


WHOSE = {"job": "the command's", "option": "--python's", "doctor": "the doctor's own"}


@check(
    "python.target",
    "The stack rows judge the interpreter the job's command runs",
    skip_if=_job_given,
    only_with="job",
    applies_when="job arguments given",
    detects="the job command's interpreter from its launch chain (the job's PATH, a script's #! line, uv run's "
            "project environment, verl's runtime_env.py_executable) against --python",
    sources=(
        Source("Python docs: sys.executable (the interpreter a Python runs as; a venv's is its own bin/python)",
               "https://docs.python.org/3/library/sys.html#sys.executable"),
        Source("Python docs: sys.path (the script's folder or the working directory first, then the environment's "
               "site-packages)", "https://docs.python.org/3/library/sys.html#sys.path"),
        Source("Python docs: the initialization of sys.path (a venv is found from the executable's own path, "
               "pyvenv.cfg)", "https://docs.python.org/3/library/sys_path_init.html"),
        Source("execve(2): interpreter scripts (#! lines)", "https://man7.org/linux/man-pages/man2/execve.2.html"),
    ),
)
def python_target(ctx: Context) -> Result:
    """The stack rows (every row but the job.* rows) judge one interpreter: without --python, the one the job's
    command runs, as its launch chain gives it (the `python3` the job's PATH finds, a script's `#!` line, `uv
    run`'s project environment, or verl's Ray workers' `runtime_env.py_executable` when the command sets it), so
    that the report shows the stack the job imports. --python stays an override: where it names another
    interpreter than the command's, the report judged --python's and this row warns, naming both (the same file
    in the same folder, a venv's python and python3, is the same interpreter). Where the command's interpreter is
    not known (its chain stops at a word the doctor does not follow, `uv run --with`, an interpreter that cannot
    run here) the stack rows judge --python's or the doctor's own, and this row warns naming the link. A job that
    runs on another host (`ray job submit`, `sbatch --wrap`) imports that host's stack: every stack row is not
    known there, and so is this one. A command of overrides only names no interpreter: a skip.
    """
    profile = ctx.profile
    job = profile.job
    chain = getattr(job, "chain", None)
    judged = ctx.target.get("judged") if isinstance(ctx.target, dict) else None
    judged = judged if isinstance(judged, dict) else {}
    python = ctx.python
    whose = WHOSE.get(str(judged.get("judged_by")), "--python's" if not same_interpreter(python, sys.executable)
                      else "the doctor's own")
    evidence: dict = {"judged": python, "judged_by": judged.get("judged_by"), "why": judged.get("why")}
    if chain is None:
        return skipped(f"the command is overrides only: it names no interpreter (the stack rows judged {python}, "
                       f"{whose})", evidence=evidence)
    evidence.update(job_python=chain.interpreter, job_python_why=chain.interpreter_why)
    if chain.remote:
        return warned(REMOTE_NOT_KNOWN.format(chain.remote), f"The stack rows judged nothing here: the job's "
                      f"interpreter and its sys.path are the remote host's ({chain.interpreter_why}).",
                      evidence=dict(evidence, remote=chain.remote))
    not_known = judged.get("job_python_not_known") or chain.stopped or (
        None if chain.interpreter else str(chain.interpreter_why).removeprefix("not known: "))
    if not_known:
        return warned(f"not known: the command's interpreter ({not_known}); the stack rows judged {python} "
                      f"({whose})", "Give the training command as it runs, or --python naming its interpreter.",
                      evidence=dict(evidence, not_known=not_known))
    if same_interpreter(python, chain.interpreter):
        said = "--python names" if whose == "--python's" else "the stack rows judged"
        return passed(f"{said} {python}, the interpreter the command runs ({chain.interpreter_why})",
                      evidence=evidence)
    return warned(f"--python {python} is not the interpreter the command runs, {chain.interpreter} "
                  f"({chain.interpreter_why}): the stack rows judged --python's",
                  "Leave --python out to judge the job's own interpreter, or run the job with --python's.",
                  evidence=evidence)


CHECKS = [python_version, python_target]

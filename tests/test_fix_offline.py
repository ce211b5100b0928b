"""`fix --download DIR` on a connected machine, then `fix --apply --from DIR` with no network (`unshare -n`), and
`fix --apply` going on after a failed step (docs/fix-plans.md#offline-fix---download-and---from).

The wheels are real (apache-tvm-ffi from PyPI, the real plan's tvm-ffi.version step; setuptools for the isolated
builds). The git pins come from local git repositories standing in for github.com (git's `url.<base>.insteadOf`, in
a git config of the test's own), because the CI machine cannot reach github.com: each is a small real package
(pyproject + a module) at a commit of its own, which a plugin check's fix pins the way the catalogue pins Megatron-LM
dev, FlashMLA and fast-hadamard-transform (`NAME @ git+https://github.com/OWNER/REPO.git@COMMIT`). The FlashMLA
stand-in holds the CUTLASS stand-in as a git submodule (csrc/cutlass), and its build reads a header from it, so an
archive without submodules would not build.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import venv
from pathlib import Path

import pytest

from conftest import FakeSite, run_doctor

ONLY = "tvm-ffi.*,demo.*"


def git(*args: str, cwd: Path, env: dict) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True,
                          timeout=60).stdout.strip()


def standin(root: Path, env: dict, owner_repo: str, files: dict[str, str], submodule: str | None = None) -> str:
    """A repository at root/OWNER/REPO.git (what https://github.com/OWNER/REPO.git reads as): its commit."""
    repo = root / owner_repo
    repo.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=repo, env=env)
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    if submodule:
        git("submodule", "add", "-q", submodule, "csrc/cutlass", cwd=repo, env=env)
    git("add", "-A", cwd=repo, env=env)
    git("commit", "-q", "-m", "stand-in", cwd=repo, env=env)
    return git("rev-parse", "HEAD", cwd=repo, env=env)


def package(name: str, module: str, setup_py: str = "") -> dict[str, str]:
    files = {"pyproject.toml": f'[build-system]\nrequires = ["setuptools>=70"]\nbuild-backend = '
                               f'"setuptools.build_meta"\n\n[project]\nname = "{name}"\nversion = "0.0.1"\n\n'
                               f'[tool.setuptools]\npy-modules = ["{module}"]\n',
             f"{module}.py": f'WHAT = "{name} stand-in"\n'}
    if setup_py:
        files["setup.py"] = setup_py
    return files


# The FlashMLA stand-in's build needs the submodule's header, as FlashMLA's needs CUTLASS's.
FLASH_SETUP = """from pathlib import Path
from setuptools import setup
header = Path("csrc/cutlass/include/cute/tensor.hpp").read_text()  # missing without the submodule: the build fails
Path("flash_mla_standin.py").write_text(f"WHAT = 'flash_mla stand-in'\\nCUTLASS = {header.strip()!r}\\n")
setup()
"""


@pytest.fixture
def world(tmp_path):
    """The stand-in github.com, the git config that points there, a plugin check that pins it, and a venv."""
    gh = tmp_path / "github"
    home = tmp_path / "home"
    home.mkdir()
    config = tmp_path / "gitconfig"
    config.write_text(f'[url "{gh}/"]\n\tinsteadOf = https://github.com/\n[protocol "file"]\n\tallow = always\n'
                      "[user]\n\tname = t\n\temail = t@example.com\n[init]\n\tdefaultBranch = main\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "GIT_"))}
    env.update(GIT_CONFIG_GLOBAL=str(config), GIT_CONFIG_NOSYSTEM="1", HOME=str(home), PIP_CONFIG_FILE=os.devnull,
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    standin(gh, env, "NVIDIA/cutlass.git", {"include/cute/tensor.hpp": "// cute stand-in\n"})
    pins = {
        "flash": ("flash_mla", "deepseek-ai/FlashMLA.git", standin(
            gh, env, "deepseek-ai/FlashMLA.git", {**package("flash_mla", "flash_mla_standin"), "setup.py": FLASH_SETUP},
            submodule="https://github.com/NVIDIA/cutlass.git"), "build"),
        "hadamard": ("fast-hadamard-transform", "Dao-AILab/fast-hadamard-transform.git", standin(
            gh, env, "Dao-AILab/fast-hadamard-transform.git",
            package("fast-hadamard-transform", "fast_hadamard_standin")), "build"),
        "mcore": ("megatron-core", "NVIDIA/Megatron-LM.git", standin(
            gh, env, "NVIDIA/Megatron-LM.git", package("megatron-core", "megatron_standin")), "pin"),
    }
    site = FakeSite(tmp_path / "site")
    fixes = ",\n    ".join(
        f'Fix("Install the {name} stand-in at its pinned commit", [["pip", "install", "--no-deps", '
        f'"{name} @ git+https://github.com/{repo}@{commit}"]], key="demo:{key}", phase="{phase}")'
        for key, (name, repo, commit, phase) in pins.items())
    site.file("offline_demo_plugin.py", f"""
import os
from dsv4_doctor.model.core import Check, Fix, failed
FIXES = [
    {fixes}]
# The plan's earlier-phase step that fails under --from: a requirement no folder holds (DEMO_FAIL set)
EARLY = Fix("A requirement of an earlier phase", [["pip", "install", "--no-deps", "dsv4-doctor-absent-demo==1.0"]],
            key="demo:early", phase="path")
def run(ctx):
    return failed("the stand-ins are asked for", fixes=([EARLY] if os.environ.get("DEMO_FAIL") else []) + FIXES)
CHECKS = [Check(id="demo.pins", title="t", explanation="x", applies_when="always", detects="x", fixes=tuple(FIXES),
                run=run)]
""")
    site.dist("offline-demo-plugin", "1", entry_points="[dsv4_doctor.checks]\nm = offline_demo_plugin\n")
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, symlinks=True).create(target)
    subprocess.run([str(target / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                    "nvidia-cudnn-frontend==1.27.0"], check=True, timeout=300, capture_output=True,
                   env={k: v for k, v in os.environ.items() if k != "PIP_CONSTRAINT"})
    return {"env": env, "site": site, "python": str(target / "bin" / "python"), "pins": pins, "tmp": tmp_path}


def offline_runner() -> list[str]:
    """`unshare -n` (a network namespace of its own: no network at all), or a skip that says why."""
    exe = shutil.which("unshare")
    if exe is None:
        pytest.skip("unshare is not installed: the --from step cannot be run without a network")
    probe = subprocess.run([exe, "-n", "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"unshare -n is refused here (not root?): {probe.stderr.decode(errors='replace').strip()}")
    return [exe, "-n", "--"]


def doctor(world, *args: str, wrap: list[str] | None = None, **env: str):
    from conftest import doctor_command

    full = dict(world["env"], PYTHONPATH=str(world["site"].root), COLUMNS="200", **env)
    argv = (wrap or []) + doctor_command() + ["fix", "--gpu-arch", "9.0", "--only", ONLY, *args,
                                              "--python", world["python"]]
    done = subprocess.run(argv, capture_output=True, text=True, env=full, timeout=600)
    return done


@pytest.mark.slow
def test_download_then_apply_from_the_folder_with_no_network(world):
    folder = world["tmp"] / "artifacts dir"  # a space in it: argv words, never a shell
    fetched = doctor(world, "--download", str(folder))
    assert fetched.returncode == 0, fetched.stderr
    names = sorted(p.name for p in folder.iterdir() if p.is_file())
    assert any(n.startswith("apache_tvm_ffi-0.1.11-") for n in names), names
    assert any(n.startswith("setuptools-") for n in names), names  # the isolated builds' requirement
    archives = sorted(p.name for p in (folder / "git").iterdir())
    assert archives == sorted(f"{n.replace('_', '-')}-{c}.tar.gz" for n, _, c, _ in world["pins"].values())
    with tarfile.open(folder / "git" / f"flash-mla-{world['pins']['flash'][2]}.tar.gz") as tar:
        members = tar.getnames()
    assert any(m.endswith("csrc/cutlass/include/cute/tensor.hpp") for m in members), members  # the submodule
    assert not any("/.git/" in m or m.endswith("/.git") for m in members), members

    offline = doctor(world, "--apply", "--yes", "--from", str(folder), wrap=offline_runner())
    assert "failed (" not in offline.stderr and "skipped (" not in offline.stderr, offline.stderr
    assert "--no-index --find-links" in offline.stdout and "file://" in offline.stdout, offline.stdout
    check = subprocess.run([world["python"], "-c", "import importlib.metadata as m, flash_mla_standin, "
                            "fast_hadamard_standin, megatron_standin; assert m.version('apache-tvm-ffi') == '0.1.11'; "
                            "print(flash_mla_standin.CUTLASS)"], capture_output=True, text=True,
                           timeout=60)
    assert check.stdout.strip() == "// cute stand-in", check.stderr
    assert "after:" in offline.stderr and "tvm-ffi.version" not in offline.stderr.split("after:", 1)[1].split(
        "still failing", 1)[-1].split("left for you", 1)[0], offline.stderr


@pytest.mark.slow
def test_apply_goes_on_after_a_failed_step_and_names_it_after_the_recheck(world):
    """An earlier-phase step fails (its requirement is in no folder): the build steps that depend on it are skipped,
    the independent pins still install, the re-check runs, and the end names the failed step with its error."""
    folder = world["tmp"] / "dl"
    assert doctor(world, "--download", str(folder)).returncode == 0
    (folder / "git" / f"megatron-core-{world['pins']['mcore'][2]}.tar.gz").unlink()  # one archive the folder lacks
    run = doctor(world, "--apply", "--yes", "--from", str(folder), wrap=offline_runner(), DEMO_FAIL="1")
    err = run.stderr
    assert run.returncode == 1, err
    plan = [line for line in run.stdout.splitlines() if line.startswith("# Step")]
    assert "A requirement of an earlier phase" in plan[0], plan
    end = err.split("\nafter:", 1)[1]
    failed = end.split("failed (2):", 1)[1].split("skipped (2):", 1)[0]
    assert "step 1 [demo.pins]" in failed and "dsv4-doctor-absent-demo==1.0" in failed, end
    assert "megatron-core" in failed and "not in the --from folder" in failed, end
    skipped = end.split("skipped (2):", 1)[1].split("still failing", 1)[0]
    assert skipped.count("it depends on step 1, which failed") == 2, end  # the two build steps
    assert "still failing (1):" in end and "demo.pins" in end
    check = subprocess.run([world["python"], "-c", "import importlib.metadata as m; "
                            "assert m.version('apache-tvm-ffi') == '0.1.11'"], capture_output=True, timeout=60)
    assert check.returncode == 0  # the independent pin ran
    gone = subprocess.run([world["python"], "-c", "import flash_mla_standin"], capture_output=True, timeout=60)
    assert gone.returncode != 0  # the skipped build did not


def test_from_a_folder_it_cannot_use_is_a_usage_error(tmp_path):
    missing = run_doctor("fix", "--only", "python.version", "--from", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "no such folder" in missing.stderr
    both = run_doctor("fix", "--only", "python.version", "--download", str(tmp_path), "--apply", "--yes")
    assert both.returncode == 2 and "--download only fetches" in both.stderr
    odd = run_doctor("fix", "--only", "python.version", "--from", "a\nb")
    assert odd.returncode == 2 and "control" in odd.stderr


def test_a_command_that_exits_is_not_waited_for_through_a_child_holding_its_output():
    """A build that leaves a background child holding the pipe (a daemon it started): the relay drains briefly after
    the command exits instead of waiting for the pipe's end, up to the step's hours-long limit."""
    import time

    from dsv4_doctor.fix.runner import run_relayed
    from dsv4_doctor.hostio.procs import Processes

    procs = Processes()
    try:
        started = time.monotonic()
        ran = run_relayed(procs, ["sh", "-c", "sleep 30 & echo done"], None, 20.0)
        assert (ran.code, ran.timed_out, ran.tail) == (0, False, "done\n")
        assert time.monotonic() - started < 5
        ran = run_relayed(procs, ["sh", "-c", "exec sleep 30"], None, 1.0)  # a command that does not exit: killed
        assert ran.timed_out and ran.code != 0
    finally:
        procs.close()

"""The report side of the launch chain: without --python the stack rows judge the interpreter the job's command runs
(a script's #! line, `uv run`'s project environment, verl's runtime_env.py_executable), and the report's first line
names it and why; --python stays an override, and python.target names both where they differ; a job submitted to
another host (`ray job submit`, `sbatch --wrap`) has its settings read and every stack row not known; a command the
doctor does not read (`bash run.sh`) makes the job rows and the verdict say so, never "ready to train".

Each interpreter is a real virtual environment whose site-packages alone holds Transformer Engine's metadata (a
dist-info, no code: te.version reads metadata), so a report that judged another interpreter shows it."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from conftest import run_doctor

from dsv4_doctor.job.command import parse

PY = sys.executable
BIN = os.path.dirname(PY)
ENGINE = "actor_rollout_ref.actor.megatron"
TE_VERSION = "2.16.1"
# A verl command with CP 2, TP 1 on 1 x 8 GPUs and no CP settings: job.cp-args fails it, job.parallelism passes it.
VERL = ["python3", "-m", "verl.trainer.main_ppo", f"{ENGINE}.context_parallel_size=2",
        f"{ENGINE}.tensor_model_parallel_size=1", "trainer.nnodes=1", "trainer.n_gpus_per_node=8",
        "data.max_prompt_length=2048", "data.max_response_length=4096"]


def with_te(root: Path) -> str:
    """A real venv at `root` whose site-packages has transformer-engine's metadata; its interpreter's path."""
    if not (root / "bin" / "python").exists():
        venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    site = root / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    dist = site / f"transformer_engine-{TE_VERSION}.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: transformer-engine\nVersion: {TE_VERSION}\n")
    (dist / "INSTALLER").write_text("pip\n")
    return str(root / "bin" / "python")


def script(path: Path, line: str) -> Path:
    path.write_text(f"#!{line}\nprint('training')\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def doctor_env(**more: str) -> dict[str, str]:
    """The job's PATH: the doctor's own venv first (its python3 is the doctor's interpreter)."""
    return {"PATH": f"{BIN}:/usr/bin:/bin", "COLUMNS": "400", **more}


def check_json(*args: str, env: dict[str, str] | None = None):
    run = run_doctor("check", "--static-only", "-f", "json", *args, env=env or doctor_env())
    assert run.returncode in (0, 1), run.stderr
    return run


def te_version(run) -> str | None:
    return run.check("te.version")["evidence"].get("version")


# --- the interpreter the command runs ---------------------------------------------------------------------------------

def test_a_shebang_naming_another_venv_is_judged_on_that_venv(tmp_path):
    """`./train.py` whose #! line names another venv's python (directly, or `/usr/bin/env python3` with that venv
    first on PATH): the stack rows judge that venv (its Transformer Engine), the first line names it "from the #! line",
    and python.target passes. The landed code judged the doctor's own interpreter (no TE there)."""
    other = tmp_path / "other"
    python = with_te(other)
    job = tmp_path / "job"
    job.mkdir()
    script(job / "train.py", python)
    run = check_json("--only", "python.*,te.version", "--job-cwd", str(job), "--job-args", "./train.py a=1")
    target = run.report["environment"]["target_python"]
    assert target["executable"] == python and te_version(run) == TE_VERSION, target
    assert (target.get("judged_by"), target.get("job_python")) == ("job", python), target
    assert "#! line of './train.py'" in target["why"], target
    assert run.check("python.target")["status"] == "pass", run.check("python.target")

    script(job / "train.py", "/usr/bin/env python3")
    on_path = doctor_env(PATH=f"{other}/bin:{BIN}:/usr/bin:/bin")
    text = run_doctor("check", "--static-only", "--only", "python.*,te.version", "--job-cwd", str(job),
                      "--job-args", "./train.py a=1", env=on_path)
    first = text.stdout.split("\nVerdict:", 1)[0].replace("\n  ", " ")
    assert f"python {other}/bin/python3 (" in first, first
    assert "the job's interpreter ('python3' on the job's PATH, from the #! line of './train.py' " \
           "(#!'/usr/bin/env' 'python3'))" in first, first


@pytest.mark.slow
def test_uv_run_is_judged_on_the_projects_environment(tmp_path):
    """`uv run python train.py` in a real uv project (made by uv, offline): the stack rows judge the project's .venv,
    as uv selects it; `uv run --with ...` leaves the interpreter not known (python.target names --with) and the
    stack rows judge the doctor's own."""
    env = doctor_env(UV_CACHE_DIR=str(tmp_path / "cache"), UV_PYTHON_DOWNLOADS="never", UV_NO_CONFIG="1",
                     HOME=str(tmp_path))

    def uv(*words: str, cwd: Path) -> None:
        done = subprocess.run([PY, "-m", "uv", *words], cwd=cwd, env=dict(os.environ, **env), capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr

    uv("init", "--bare", "--offline", "--name", "proj", "--python", PY, "proj", cwd=tmp_path)
    project = tmp_path / "proj"
    uv("venv", "--offline", "--python", PY, cwd=project)
    python = with_te(project / ".venv")
    command = "uv run --offline --no-sync python train.py a=1"
    run = check_json("--only", "python.*,te.version", "--job-cwd", str(project), "--job-args", command, env=env)
    target = run.report["environment"]["target_python"]
    assert target["executable"] == python and te_version(run) == TE_VERSION, target
    assert target.get("judged_by") == "job" and "uv run: the project's environment" in target["why"], target
    assert run.check("python.target")["status"] == "pass"

    layered = check_json("--only", "python.*,te.version", "--job-cwd", str(project), "--job-args",
                         "uv run --with numpy python train.py", env=env)
    row = layered.check("python.target")
    assert row["status"] == "warn" and row["summary"].startswith("not known") and "--with" in row["summary"], row
    target = layered.report["environment"]["target_python"]
    assert target["judged_by"] == "doctor" and "--with" in target["job_python_not_known"], target
    assert te_version(layered) != TE_VERSION


def test_verls_py_executable_is_the_interpreter_the_stack_rows_judge(tmp_path):
    """verl's Ray workers import the stack with `ray_kwargs.ray_init.runtime_env.py_executable` when the command sets
    it: that venv is judged, and the first line says why."""
    python = with_te(tmp_path / "workers")
    command = shlex.join(VERL + [f"ray_kwargs.ray_init.runtime_env.py_executable={python}"])
    run = check_json("--only", "python.*,te.version", "--job-args", command)
    target = run.report["environment"]["target_python"]
    assert target["executable"] == python and te_version(run) == TE_VERSION, target
    assert target.get("judged_by") == "job" and "runtime_env.py_executable" in target["why"], target


def test_python_that_disagrees_with_the_commands_interpreter_is_judged_and_python_target_names_both(tmp_path):
    """--python stays an override: the stack rows judge it, and python.target warns naming it and the interpreter
    the command runs (`python3` on the job's PATH: the doctor's own venv here)."""
    python = with_te(tmp_path / "other")
    run = check_json("--only", "python.*,te.version", "--python", python, "--job-args", shlex.join(VERL))
    row = run.check("python.target")
    job_python = os.path.join(BIN, "python3")
    assert row["status"] == "warn", row
    assert f"--python {python} is not the interpreter the command runs, {job_python}" in row["summary"], row
    assert "the stack rows judged --python's" in row["summary"], row
    target = run.report["environment"]["target_python"]
    assert (target["executable"], target["judged_by"], target["job_python"]) == (python, "option", job_python)
    assert te_version(run) == TE_VERSION


# --- a job submitted to another host ----------------------------------------------------------------------------------

def test_a_remote_job_is_read_and_every_stack_row_is_not_known(tmp_path):
    """`ray job submit ... -- CMD`: the job rows read CMD as they read it run here (job.cp-args fails it for the same
    reason, job.parallelism passes it), every other row is not known (a warning naming the submitter, never judged on
    this interpreter), and the exit code and verdict follow the job rows. The landed code read nothing after the
    submitter (every job row skipped) and judged the local interpreter."""
    local = check_json("--job-args", shlex.join(VERL))
    remote = check_json("--job-args", shlex.join(["ray", "job", "submit", "--address", "http://127.0.0.1:8265",
                                                  "--", *VERL]))
    for check_id in ("job.cp-args", "job.parallelism"):
        here, there = local.check(check_id), remote.check(check_id)
        assert (there["status"], there["summary"]) == (here["status"], here["summary"]), (check_id, here, there)
    assert remote.check("job.cp-args")["status"] == "fail" and remote.check("job.parallelism")["status"] == "pass"
    stack = [c for c in remote.report["checks"] if not c["id"].startswith("job.")]
    said = "not known: the job runs on the remote host (`ray job submit`); check there, or use `check --ray`"
    assert stack and all(c["status"] == "warn" and c["summary"] == said for c in stack), \
        [(c["id"], c["status"], c["summary"]) for c in stack]
    summary = remote.report["summary"]
    assert (remote.returncode, summary["exit_code"], summary["status"]) == (1, 1, "fail")
    assert remote.report["environment"]["target_python"]["remote"] == "ray job submit"
    # sbatch --wrap: the same reading of the command inside the string.
    wrapped = parse(["sbatch", "--nodes", "1", "--wrap", shlex.join(VERL)], str(tmp_path))
    assert (wrapped.kind, wrapped.entry, wrapped.chain.remote) == ("verl", "verl.trainer.main_ppo", "sbatch --wrap")
    assert wrapped.roles["actor"]["cp"].value == 2


# --- a command the doctor does not read -------------------------------------------------------------------------------

def test_a_script_run_by_bash_leaves_the_job_rows_not_known_and_the_verdict_says_so(tmp_path):
    """`bash run.sh`: every job row is not known (a warning naming `bash` and 'run.sh', never a skip), the verdict
    line says the job's command was not read (text, markdown, JSON), and the report never says "ready to train".
    The landed code skipped every job row and, with the rest passing, said "ready to train"."""
    (tmp_path / "run.sh").write_text("python3 -m verl.trainer.main_ppo \"$@\"\n")
    env = doctor_env(NCCL_NVLS_ENABLE="0", CUDA_DEVICE_MAX_CONNECTIONS="1")
    args = ("--only", "job.*,python.version", "--gpu-arch", "9.0", "--job-cwd", str(tmp_path), "--job-args",
            "bash run.sh")
    run = check_json(*args, env=env)
    rows = [c for c in run.report["checks"] if c["id"].startswith("job.")]
    assert len(rows) == 8, [c["id"] for c in rows]
    for row in rows:
        assert row["status"] == "warn" and row["summary"].startswith("not known"), row
        assert "`bash`" in row["summary"] and "'run.sh'" in row["summary"], row
    summary = run.report["summary"]
    assert summary["status"] == "warn" and summary["exit_code"] == 0
    assert summary["job_not_read"].startswith("`bash` runs the script 'run.sh'"), summary
    text = run_doctor("check", "--static-only", *args, env=env)
    verdicts = [line for line in text.stdout.replace("\n  ", " ").splitlines() if line.startswith("Verdict:")]
    assert len(verdicts) == 2 and all("the job's command was not read (`bash` runs the script 'run.sh'" in v
                                      for v in verdicts), text.stdout
    assert "ready to train" not in text.stdout, text.stdout
    markdown = run_doctor("check", "--static-only", "-f", "markdown", *args, env=env)
    assert "the job's command was not read" in markdown.stdout and "ready to train" not in markdown.stdout


def test_explain_job_cp_args_names_the_launch_chains_sources():
    """The resolver's sources: CPython's sys.path rules, each wrapper's manual at the commit its grammar was read
    from (doctor/job/wrappers.py), Hydra's argument parser."""
    out = run_doctor("explain", "job.cp-args", env={"COLUMNS": "400"}).stdout
    sources = out.split("\nSources:\n", 1)[1]
    for cited in ("https://docs.python.org/3/library/sys.html#sys.path",
                  "GNU coreutils aa0c0de35: env(1), nice(1), nohup(1), stdbuf(1), timeout(1), chroot(1)",
                  "util-linux 39465c780: taskset(1), ionice(1), chrt(1), setsid(1)", "numactl 93c1fe5: numactl(8)",
                  "Slurm srun(1)", "Slurm sbatch(1)", "Ray `ray job submit`", "uv run (uv 26a9dd4b", "torchrun",
                  "https://github.com/facebookresearch/hydra/blob/v1.3.2/hydra/_internal/utils.py",
                  "get_args_parser"):
        assert cited in sources, (cited, sources)

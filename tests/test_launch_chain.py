"""The launch chain (doctor/job/chain.py): a training command read as the OS and each launcher in it will run it.

Real tools wherever this machine has them: each coreutils and util-linux wrapper, GNU time, sh/bash/dash -c, a
script's #! line, uv (from the test extras) in a real offline project, torchrun, all run around a tiny Python that
prints what really ran (its argv, sys.executable, working directory, sys.path[0], environment), which the resolver
must predict from the words alone. What the machine lacks (srun, sbatch, numactl, a Ray cluster) is checked against
the grammar taken from the program's own source (doctor/job/wrappers.py names the commit)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from conftest import run_doctor
from wheels import ensure

from dsv4_doctor.job.chain import resolve
from dsv4_doctor.job.command import parse, split_job_args
from dsv4_doctor.job.profile import job_profile
from dsv4_doctor.job.syspath import job_path
from dsv4_doctor.model.core import Profile, UsageError

PY = sys.executable
BIN = os.path.dirname(PY)
SHOW = """import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "executable": sys.executable, "cwd": os.getcwd(), "path0": sys.path[0],
                  "env": {k: os.environ.get(k) for k in ("CHAIN_A", "CHAIN_B", "HOME")}}))
"""
OTC = "actor_rollout_ref.actor.megatron.override_transformer_config"
ENGINE = "actor_rollout_ref.actor.megatron"


@pytest.fixture
def job(tmp_path) -> Path:
    """The job's folder: show.py (prints what ran) and a sub-folder."""
    folder = tmp_path / "job"
    (folder / "sub").mkdir(parents=True)
    (folder / "show.py").write_text(SHOW)
    return folder


def environ(tmp_path: Path, **more: str) -> dict[str, str]:
    return {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path), "CHAIN_A": "outer", **more}


def ran(argv: list[str], cwd: Path, env: dict[str, str]) -> dict:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_predicted(argv: list[str], cwd: Path, env: dict[str, str]) -> None:
    """What the real command ran is what the resolver says it runs."""
    real = ran(argv, cwd, env)
    chain = resolve(argv, str(cwd), env)
    assert chain.stopped is None and chain.entry_kind == "script", chain.to_dict()
    assert chain.cwd is not None and os.path.realpath(chain.cwd) == real["cwd"]
    assert os.path.realpath(os.path.join(chain.cwd, chain.entry or "")) == os.path.realpath(cwd / "show.py")
    assert chain.args == real["argv"]
    assert chain.interpreter == real["executable"], chain.interpreter_why
    assert chain.sys_path0 == real["path0"]
    expected = {} if chain.env_cleared else dict(env)
    for name in chain.env_unset:
        expected.pop(name, None)
    expected.update(chain.env_set)
    assert {k: expected.get(k) for k in real["env"]} == real["env"]


# --- coreutils, util-linux and GNU time, for real ---------------------------------------------------------------------

WRAPPED = [
    ["timeout", "-k5", "30", PY, "show.py", "a=1"],
    ["timeout", "--kill-after=5", "--signal=TERM", "30", PY, "show.py", "b"],
    ["timeout", "-s", "KILL", "--", "30s", PY, "show.py"],
    ["timeout", "-vk1", "--preserve-status", "30", PY, "show.py", "-k", "9"],
    ["nohup", PY, "show.py", "x"],
    ["nohup", "--", PY, "show.py"],
    ["nice", "-n", "5", PY, "show.py"],
    ["nice", "-5", PY, "show.py"],
    ["nice", "--adjustment=3", PY, "show.py", "--adjustment=4"],
    ["stdbuf", "-oL", "-e", "0", PY, "show.py"],
    ["stdbuf", "--output=L", "--err=0", PY, "show.py"],  # getopt_long: a unique prefix names the option
    ["env", "-u", "CHAIN_A", "CHAIN_B=2", PY, "show.py"],
    ["env", "--chdir=sub", "-uHOME", "CHAIN_B=x y", PY, "../show.py", "c"],
    ["env", "-i", "CHAIN_B=3", f"PATH={BIN}:/usr/bin", "python3", "show.py"],
    ["env", "-", "CHAIN_B=4", PY, "show.py"],
    ["env", "-S", f"CHAIN_B=5 {PY} -u", "show.py", "d"],
    ["env", "-C", "sub", "--", "python3", "../show.py"],
    ["taskset", "-c", "0", PY, "show.py"],
    ["taskset", "0x1", PY, "show.py"],
    ["taskset", "--cpu-list", "0", PY, "show.py"],
    ["ionice", "-c", "3", PY, "show.py"],
    ["ionice", "-c2", "-n7", "-t", PY, "show.py"],
    ["setsid", "-w", PY, "show.py"],
    ["setsid", "--fork", "--wait", PY, "show.py"],
    ["/usr/bin/time", "-f", "%e", "-o", "time.out", PY, "show.py"],
    ["/usr/bin/time", "--quiet", "-p", PY, "show.py", "-p"],
    ["chrt", "-o", "0", PY, "show.py"],
    ["chrt", "--batch", "0", PY, "show.py"],
    ["sh", "-c", f'cd sub && CHAIN_B=7 exec {PY} ../show.py "$@" x=$1', "name", "p 1", "q=2"],
    ["bash", "-ec", 'export CHAIN_B="8 9"; python3 show.py "$@"', "bash", "a=1", "b c"],
    ["dash", "-c", f'{PY} show.py $* "$*" $0 "$2"', "zero", "u v", "w"],
    ["bash", "-o", "pipefail", "-c", f"set -eu; unset CHAIN_A; cd sub; exec -c {PY} ../show.py > /dev/null 2>&1 "
     "|| true"],
    ["bash", "-c", f"CHAIN_B=10; export CHAIN_B; command {PY} show.py # a comment"],
]


def _runs_here(argv: list[str]) -> bool:
    return shutil.which(argv[0]) is not None


@pytest.mark.slow
@pytest.mark.parametrize("argv", [a for a in WRAPPED if _runs_here(a)], ids=lambda a: shlex.join(a[:3])[:40])
def test_each_wrapper_is_read_as_it_really_runs(argv, job, tmp_path):
    """Each coreutils/util-linux wrapper, GNU time and shell -c string, with their option spellings (attached values,
    `--opt=value`, `--`, combined flags, a unique prefix), run for real: the resolver names the entry, its arguments,
    the interpreter, the working directory, sys.path[0] and the environment that really ran."""
    if argv[0] == "bash" and "> /dev/null" in argv[-1]:
        # The output redirection and `||` list: not followed (a list), so the chain stops, naming it.
        chain = resolve(argv, str(job), environ(tmp_path))
        assert chain.stopped is not None and "`||`" in chain.stopped
        return
    assert_predicted(argv, job, environ(tmp_path))


def test_a_chain_of_wrappers_reaches_the_job_and_its_settings(job, tmp_path):
    """nohup, timeout, env, nice, stdbuf, taskset and setsid in front of python, run for real (one subprocess)."""
    argv = ["nohup", "timeout", "-k", "5", "3600", "env", "CHAIN_B=6", "nice", "-n", "1", "stdbuf", "-oL", "taskset",
            "-c", "0", "setsid", "-w", PY, "show.py", "e=1"]
    assert_predicted(argv, job, environ(tmp_path))
    assert [s.name for s in resolve(argv, str(job), environ(tmp_path)).steps] == [
        "nohup", "timeout", "env", "nice", "stdbuf", "taskset", "setsid", os.path.basename(PY)]


def test_a_shell_string_with_positional_parameters(job, tmp_path):
    argv = ["bash", "-c", f'cd sub && export CHAIN_B=1; exec {PY} ../show.py "$@" "$1"x $#', "bash", "a=1", "b c"]
    assert_predicted(argv, job, environ(tmp_path))
    chain = resolve(argv, str(job), environ(tmp_path))
    assert chain.args == ["a=1", "b c", "a=1x", "2"] and [s.kind for s in chain.steps] == ["shell", "builtin",
                                                                                         "interpreter"]


def test_wrapped_verl_jobs_are_read_where_the_landed_reader_skipped_them():
    """nohup/timeout/numactl/taskset/stdbuf/exec in front once made every job.* row skip (a fixed list of programs
    whose command was not read): the wrapped job's CP, TP and world are now read, as unwrapped."""
    job_args = ["python3", "-m", "verl.trainer.main_ppo", f"{ENGINE}.context_parallel_size=2",
                f"{ENGINE}.tensor_model_parallel_size=1", "trainer.nnodes=2", "trainer.n_gpus_per_node=8"]
    plain = job_profile(Profile(), job_args, None, None)
    fronts = (["nohup"], ["timeout", "3600"], ["numactl", "--cpunodebind=0", "--membind=0"], ["taskset", "-c", "0-7"],
              ["stdbuf", "-oL"], ["exec"], ["nohup", "timeout", "-s", "KILL", "3600", "numactl", "-N", "0"])
    for front in fronts:
        profile = job_profile(Profile(), [*front, *job_args], None, None)
        assert profile.job is not None and profile.job.kind == "verl", front
        assert profile.cp == plain.cp == 2 and profile.cp_source == "job"
        assert profile.job.common["nnodes"].value == 2 and profile.job.roles["actor"]["tp"].value == 1
        assert profile.job.decisions is not None and profile.job.decisions.cp_known


# --- scripts run directly: the #! line --------------------------------------------------------------------------------

def _script(path: Path, line: str) -> Path:
    path.write_text(f"#!{line}\n" + SHOW)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.slow
def test_a_shebang_names_another_venvs_interpreter(job, tmp_path):
    """A script run directly is judged on the interpreter its #! line names: another venv's python, or
    `/usr/bin/env python3` with that venv first on PATH, or `env -S python3 -u`."""
    other = tmp_path / "other"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(other)
    python = str(other / "bin" / "python")
    direct = _script(job / "show.py", python)
    env = environ(tmp_path)
    assert_predicted(["./show.py", "a=1"], job, env)
    chain = resolve(["./show.py"], str(job), env)
    assert chain.interpreter == python and "#! line of './show.py'" in chain.interpreter_why
    assert direct.exists()
    _script(job / "show.py", "/usr/bin/env python3")
    on_path = environ(tmp_path, PATH=f"{other}/bin:/usr/bin:/bin")
    assert_predicted(["./show.py", "b"], job, on_path)
    assert resolve(["./show.py"], str(job), on_path).interpreter == f"{other}/bin/python3"
    _script(job / "show.py", "/usr/bin/env -S python3 -u")
    assert_predicted(["./show.py", "c"], job, on_path)
    # A script found on PATH by its name: the kernel gets the found path.
    (tmp_path / "tools").mkdir()
    shutil.move(str(job / "show.py"), str(tmp_path / "tools" / "show.py"))
    by_name = environ(tmp_path, PATH=f"{tmp_path}/tools:{other}/bin:/usr/bin:/bin")
    real = ran(["show.py", "d"], job, by_name)
    chain = resolve(["show.py", "d"], str(job), by_name)
    assert (chain.interpreter, chain.args, chain.sys_path0) == (real["executable"], real["argv"], real["path0"])


def test_a_script_the_doctor_cannot_follow_stops_the_chain(tmp_path):
    (tmp_path / "run.sh").write_text("#!/bin/bash\npython3 -m verl.trainer.main_ppo \"$@\"\n")
    (tmp_path / "run.sh").chmod(0o755)
    chain = resolve(["./run.sh", f"{ENGINE}.context_parallel_size=2"], str(tmp_path), environ(tmp_path))
    assert chain.stopped is not None and chain.stopped.startswith("`bash` runs the script")
    assert parse(["./run.sh", f"{ENGINE}.context_parallel_size=2"], str(tmp_path)).kind == "unknown"
    # A Python script that is not here keeps its entry (a Megatron-LM pretrain script), its interpreter not known.
    gpt = resolve(["pretrain_gpt.py", "--context-parallel-size", "2"], str(tmp_path), environ(tmp_path))
    assert gpt.entry == "pretrain_gpt.py" and gpt.interpreter is None and "not on the job's PATH" in \
        gpt.interpreter_why


# --- controls ---------------------------------------------------------------------------------------------------------

def test_controls_keep_their_answers(tmp_path):
    """`bash run.sh` stays not known (stopped, naming the word); `python -P` adds no script folder; an unknown
    program ends the chain."""
    bash = parse(["bash", "run.sh", f"{ENGINE}.context_parallel_size=2"])
    assert bash.kind == "unknown" and bash.chain is not None and "'run.sh'" in (bash.chain.stopped or "")
    profile = job_profile(Profile(), ["bash", "run.sh"], None, None)
    assert profile.job is not None and profile.job.decisions is not None
    assert "`bash` runs the script 'run.sh'" in (profile.job.decisions.not_known or "")
    assert job_path(["python", "-P", "t.py"], str(tmp_path)).path is None
    assert job_path(["python", "t.py"], str(tmp_path)).path == os.path.realpath(tmp_path)
    unknown = resolve(["frobnicate", "--x", "python3", "-m", "verl.trainer.main_ppo"], str(tmp_path),
                      environ(tmp_path))
    assert unknown.stopped is not None and unknown.stopped.startswith("`frobnicate` is a program")
    assert unknown.entry is None and unknown.interpreter is None
    for argv in (["mpirun", "-np", "8", "python3", "x.py"], ["xargs", "python3"], ["docker", "run", "img"],
                 ["chroot", "/srv", "python3", "x.py"], ["sh", "-c", "python3 x.py | grep step"],
                 ["sh", "-c", "python3 x.py | tee log | grep step"]):
        assert resolve(argv, str(tmp_path), environ(tmp_path)).stopped, argv
    # `| tee FILE` (any number of them) copies the job's output and changes none of it: followed.
    for line in ("python3 x.py 2>&1 | tee log", "python3 x.py |& tee -a log | tee other"):
        teed = resolve(["sh", "-c", line], str(tmp_path), environ(tmp_path))
        assert teed.stopped is None and teed.entry == "x.py", line


# --- unexpanded words are never settings ------------------------------------------------------------------------------

def test_command_substitution_and_positional_words_are_never_settings():
    """`$(cat FILE)` and backquotes stay one unexpanded word each (the landed reader split them and read the rest,
    so a command whose settings came from a file got a confident CP 1); `$@` likewise. The CP is then not known."""
    for line in ("python3 -m verl.trainer.main_ppo $(cat args.txt) trainer.nnodes=1",
                 "python3 -m verl.trainer.main_ppo `cat args.txt` trainer.nnodes=1",
                 "python3 -m verl.trainer.main_ppo \"$@\" trainer.nnodes=1"):
        argv = split_job_args(line)
        assert len(argv) == 5, argv
        profile = job_profile(Profile(), argv, None, None)
        assert profile.job is not None and profile.job.decisions is not None
        assert profile.job.decisions.cp_known is False and profile.cp_source == "default", line
        assert profile.job.chain is not None and profile.job.chain.hidden
    # Inside a -c string the positional parameters are expanded as the shell does; other words stay unexpanded.
    chain = resolve(["bash", "-c", 'python3 -m verl.trainer.main_ppo "$@" $EXTRA', "bash", f"{ENGINE}.context_"
                     "parallel_size=2"], "/", {"PATH": f"{BIN}:/usr/bin"})
    assert chain.args == [f"{ENGINE}.context_parallel_size=2", "$EXTRA"] and chain.hidden == ["$EXTRA"]
    # torchrun's options: a word there may hold the world size, unless it is stated after it.
    world = resolve(["torchrun", "$DIST", "--nnodes", "2", "pretrain_gpt.py"], "/", {}).world
    assert world is not None and world.nnodes == 2 and "nproc_per_node" in world.not_known
    assert "$DIST" in world.not_known["nproc_per_node"]
    job = parse(["torchrun", "--nproc-per-node", "8", "$DIST", "pretrain_gpt.py", "--context-parallel-size", "2"])
    assert job.cp() == 2 and job.hidden_launcher == ["$DIST"]
    assert str(job.common["gpus_per_node"].value) == "$DIST"


# --- launchers: torchrun's world size, srun, submitters ---------------------------------------------------------------

def test_torchruns_world_size_and_what_it_leaves_not_known():
    def world(*options: str, env: dict | None = None):
        chain = resolve(["torchrun", *options, "-m", "verl.trainer.sft_trainer"], "/", env or {})
        assert chain.world is not None and chain.entry == "verl.trainer.sft_trainer"
        return chain.world

    assert world("--nnodes", "2", "--nproc-per-node", "8").size() == 16
    assert world("--nnodes=2:2", "--nproc_per_node=4").size() == 8
    assert world("--nproc", "8").size() == 8  # argparse takes a unique prefix
    assert world(env={"PET_NNODES": "3", "PET_NPROC_PER_NODE": "2"}).size() == 6
    elastic = world("--nnodes", "1:4", "--nproc-per-node", "8")
    assert elastic.size() is None and "elastic range" in elastic.not_known["nnodes"]
    for word in ("auto", "gpu", "cpu", "xpu"):
        auto = world("--nproc-per-node", word)
        assert auto.size() is None and "decided on each node" in auto.not_known["nproc_per_node"]
    elastic_job = parse(["torchrun", "--nnodes=1:4", "--nproc-per-node=8", "pretrain_gpt.py"])
    assert str(elastic_job.common["nnodes"].value) == "1:4" and "elastic" in (elastic_job.common["nnodes"].resolved
                                                                              or "")
    with pytest.raises(UsageError, match="has no value"):
        parse(["torchrun", "--nnodes"])


@pytest.mark.slow
def test_torchrun_for_real(job, tmp_path):
    """torchrun's worker runs `sys.executable -u SCRIPT ARGS` of torchrun's own interpreter (its #! line)."""
    if shutil.which("torchrun", path=BIN) is None:
        pytest.skip("no torchrun in the test environment")
    argv = ["torchrun", "--nnodes", "1", "--nproc-per-node", "1", "--standalone", "show.py", "a=1", "--nnodes", "9"]
    env = environ(tmp_path)
    done = subprocess.run(argv, cwd=job, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    real = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    chain = resolve(argv, str(job), env)
    assert (chain.interpreter, chain.args, chain.sys_path0) == (real["executable"], real["argv"], real["path0"])
    assert chain.world is not None and chain.world.size() == 1


def test_srun_from_slurms_own_option_table(tmp_path):
    """No Slurm here: srun's grammar is the option table of Slurm's src/common/slurm_opt.c (284c3b95), as
    slurm_option_table_create builds it ('+' getopt string: the command starts at the first word that is no
    option)."""
    env = environ(tmp_path)
    chain = resolve(["srun", "-N2", "--ntasks-per-node=8", "-D", "sub", "--export=ALL,CHAIN_B=1", "-K1", "-l",
                     "--kill-on-bad-exit=1", "--cpu-bind", "none", "--pty", "python3", "-m", "verl.trainer.main_ppo",
                     "a=1"], str(tmp_path), env)
    assert chain.stopped is None and chain.entry == "verl.trainer.main_ppo" and chain.args == ["a=1"]
    assert chain.cwd == str(tmp_path / "sub") and chain.env_set == {"CHAIN_B": "1"}
    assert chain.steps[0].name == "srun" and "slurm_opt.c" in chain.steps[0].manual
    # -I takes an optional value (attached only): `-I python3` is the flag, then the command.
    assert resolve(["srun", "-I", "python3", "x.py"], str(tmp_path), env).entry == "x.py"
    for argv, why in ((["srun", "--multi-prog", "tasks.conf"], "--multi-prog"),
                      (["srun", "-n1", "python3", "a.py", ":", "-n1", "python3", "b.py"], "heterogeneous"),
                      (["srun", "--frobnicate", "python3", "x.py"], "is no option of srun"),
                      (["srun", "--export=NONE", "bash", "x.sh"], "runs the script")):
        stopped = resolve(argv, str(tmp_path), env).stopped
        assert stopped is not None and why in stopped, (argv, stopped)
    assert resolve(["srun", "--export=NONE", "python3", "x.py"], str(tmp_path), env).env_not_known


def test_submitters_run_the_job_on_another_host():
    """`ray job submit ... -- CMD` and `sbatch --wrap CMD`: the settings are read from the remote command, the
    interpreter is the remote host's."""
    line = ["python3", "-m", "verl.trainer.main_ppo", f"{ENGINE}.context_parallel_size=2", "trainer.nnodes=2"]
    ray = resolve(["ray", "job", "submit", "--address", "http://head:8265", "--working-dir", ".", "--no-wait", "--",
                   *line], "/", {})
    assert ray.remote == "ray job submit" and ray.entry == "verl.trainer.main_ppo" and ray.args == line[3:]
    assert ray.interpreter is None and "remote host" in ray.interpreter_why and ray.sys_path0 is None
    job = parse(["ray", "job", "submit", "--address", "X", "--", *line])
    assert job.kind == "verl" and job.chain is not None and job.chain.remote == "ray job submit"
    profile = job_profile(Profile(), ["ray", "job", "submit", "--", *line], None, None)
    assert profile.job is not None and profile.cp == 2 and profile.cp_source == "job"
    sbatch = resolve(["sbatch", "-N", "2", "--wrap", shlex.join(line) + " \"$@\""], "/", {})
    assert sbatch.remote == "sbatch --wrap" and sbatch.args == line[3:]
    assert resolve(["sbatch", "job.sh"], "/", {}).stopped
    assert resolve(["ray", "job", "submit", "python3", "x.py", "--flag"], "/", {}).stopped  # no `--`


def test_verls_py_executable_names_the_workers_interpreter(tmp_path):
    env = environ(tmp_path)
    args = ["python3", "-m", "verl.trainer.main_ppo",
            "+ray_kwargs.ray_init.runtime_env.py_executable=/opt/w/bin/python"]
    chain = resolve(args, str(tmp_path), env)
    assert chain.interpreter == "/opt/w/bin/python" and "py_executable" in chain.interpreter_why
    assert chain.entry_interpreter == f"{BIN}/python3"
    assert resolve([*args, "~ray_kwargs.ray_init.runtime_env.py_executable"], str(tmp_path), env).interpreter == \
        f"{BIN}/python3"  # deleted again: the driver's
    hidden = resolve([*args[:3], "ray_kwargs.ray_init.runtime_env.py_executable=$PY"], str(tmp_path), env)
    assert hidden.interpreter is None and hidden.interpreter_why.startswith("not known")


def test_the_chain_in_the_report_names_no_values():
    job = parse(["env", "WANDB_API_KEY=sekrit-value-1", "timeout", "9", "python3", "-m", "verl.trainer.main_ppo",
                 "trainer.logger.wandb.key=sekrit-value-2", f"{ENGINE}.context_parallel_size=2"])
    wire = job.to_dict()["chain"]
    assert "sekrit" not in json.dumps(wire) and wire["env_set"] == ["WANDB_API_KEY"] and wire["args_count"] == 2
    assert [s["name"] for s in wire["steps"]] == ["env", "timeout", "python3"] and wire["entry"] == \
        "verl.trainer.main_ppo"


# --- uv run, in a real offline project --------------------------------------------------------------------------------

@pytest.mark.slow
def test_uv_run_selects_the_projects_environment_as_uv_does(tmp_path):
    """uv's own project discovery, compared with what a real `uv run --offline --no-sync python` prints:
    the project's .venv, --project, --directory, UV_PROJECT_ENVIRONMENT; --with is not known."""
    env = environ(tmp_path, UV_CACHE_DIR=str(tmp_path / "cache"), UV_PYTHON_DOWNLOADS="never", UV_NO_CONFIG="1")
    uv = [PY, "-m", "uv"]

    def run(*words: str, cwd: Path) -> str:
        done = subprocess.run([*uv, *words], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    run("init", "--bare", "--offline", "--name", "proj", "--python", PY, "proj", cwd=tmp_path)
    project = tmp_path / "proj"
    run("venv", "--offline", "--python", PY, cwd=project)
    run("venv", "--offline", "--python", PY, "other", cwd=project)
    (project / "deep" / "er").mkdir(parents=True)
    code = ["python", "-c", "import sys; print(sys.executable)"]
    cases = [(["run", "--offline", "--no-sync", *code], project / "deep" / "er", {}),
             (["run", "--offline", "--no-sync", "--project", "proj", *code], tmp_path, {}),
             (["run", "--offline", "--no-sync", "--directory", "proj", *code], tmp_path, {}),
             (["--directory", "proj", "run", "--offline", "--no-sync", *code], tmp_path, {}),
             (["run", "--offline", "--no-sync", *code], project, {"UV_PROJECT_ENVIRONMENT": "other"})]
    for words, cwd, more in cases:
        env.update(more)
        real = run(*words, cwd=cwd)
        chain = resolve(["uv", *words], str(cwd), env)
        assert chain.interpreter == real and "uv run: the project's environment" in chain.interpreter_why, words
        for name in more:
            env.pop(name)
    with_ = resolve(["uv", "run", "--with", "numpy", *code], str(project), env)
    assert with_.interpreter is None and "--with" in with_.interpreter_why
    outside = resolve(["uv", "run", *code], str(tmp_path), env)
    assert outside.interpreter is None and "no project" in outside.interpreter_why
    module = resolve(["uv", "run", "--no-sync", "-m", "verl.trainer.main_ppo", "a=1"], str(project), env)
    assert (module.entry, module.args, module.interpreter) == ("verl.trainer.main_ppo", ["a=1"],
                                                               str(project / ".venv" / "bin" / "python"))


# --- end to end, through the CLI, on verl 0.9.1 -----------------------------------------------------------------------

@pytest.mark.slow
def test_a_wrapped_job_gets_its_real_verdict_through_the_cli(bare_python):
    """`nohup timeout 3600 numactl --cpunodebind=0 python3 -m verl.trainer.main_ppo ...` (the landed reader skipped
    every job.* row): TP 3 fails job.parallelism, and job.cp-args answers as it does for the unwrapped command."""
    job_args = ["python3", "-m", "verl.trainer.main_ppo", "model_engine=megatron", "data.max_prompt_length=2048",
                "data.max_response_length=4096", f"{ENGINE}.context_parallel_size=2",
                f"{ENGINE}.tensor_model_parallel_size=3", "trainer.nnodes=1", "trainer.n_gpus_per_node=8"]
    sites = (ensure("verl-0.9.1"),)

    def rows(argv: list[str]) -> dict:
        run = run_doctor("check", "-f", "json", "--no-smoke", "--only", "job.*", "--job-args", shlex.join(argv),
                         sites=sites, python=bare_python)
        assert run.returncode in (0, 1), run.stderr
        return {c["id"]: c for c in run.report["checks"]} | {"_profile": run.report["profile"]}

    wrapped = rows(["nohup", "timeout", "3600", "numactl", "--cpunodebind=0", *job_args])
    plain = rows(job_args)
    assert wrapped["job.parallelism"]["status"] == "fail", wrapped["job.parallelism"]
    assert "TP size 1" in wrapped["job.parallelism"]["summary"]
    assert (wrapped["job.cp-args"]["status"], wrapped["job.cp-args"]["summary"]) == \
        (plain["job.cp-args"]["status"], plain["job.cp-args"]["summary"])
    assert wrapped["job.cp-args"]["status"] != "skip" and wrapped["_profile"]["cp"] == 2
    chain = wrapped["_profile"]["job"]["chain"]
    assert [s["name"] for s in chain["steps"]][:3] == ["nohup", "timeout", "numactl"]

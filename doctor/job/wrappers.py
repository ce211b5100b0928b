"""The programs a training command may start with, described as data: each one's option grammar as its own parser
declares it, the words it takes before the command it runs, and what it changes (environment, working directory).
doctor/job/chain.py reads a command line with these tables; nothing here is run.

An option grammar is written as the program's source writes it: a getopt short-option string ("+fk:ps:v": a letter
followed by ':' takes a value, by '::' an optional one that must be attached; the leading '+' stops at the first word
that is no option) and its long options (name, has_arg 0/1/2, the short letter or key it stands for). getopt_long and
argparse accept a unique prefix of a long option; clap and click do not.

Sources, by the commit read:
- GNU coreutils aa0c0de35 (9.11+; Debian 12 ships 9.1, whose options are a subset): src/env.c, nice.c, nohup.c
  (parse_gnu_standard_options_only), stdbuf.c, timeout.c, chroot.c; their manuals env(1), nice(1), nohup(1),
  stdbuf(1), timeout(1).
- util-linux 39465c780 (2.43-devel; Debian 12 ships 2.38.1): schedutils/taskset.c, ionice.c, chrt.c,
  sys-utils/setsid.c; taskset(1), ionice(1), chrt(1), setsid(1).
- GNU time 1.9 time.c (getopt "+af:o:pqvV"), time(1).
- numactl 93c1fe5 (2.0.19+): numactl.c opts[] and get_short_opts (a '+' string), numactl(8).
- Slurm 284c3b95 (master): src/common/slurm_opt.c common_options[] as slurm_option_table_create builds srun's and
  sbatch's getopt tables ('+' string; an option is srun's when it has set_func or set_func_srun); srun(1), sbatch(1).
- bash 5.2 builtins exec and command (bash(1) SHELL BUILTIN COMMANDS; POSIX.1-2017 `exec`, `command`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    """An option grammar: `short` a getopt string, `long` (name, has_arg, key) triples."""

    short: str
    long: tuple[tuple[str, int, str], ...] = ()
    abbrev: bool = True  # a unique prefix of a long option names it (getopt_long, argparse)

    def short_arg(self, letter: str) -> int | None:
        """0: a flag, 1: takes a value, 2: an optional attached value; None: no such option."""
        text = self.short.lstrip("+-")
        at = text.find(letter)
        if letter in ":" or at < 0:
            return None
        return 2 if text[at + 1:at + 3] == "::" else 1 if text[at + 1:at + 2] == ":" else 0

    def long_option(self, name: str) -> tuple[tuple[str, int, str] | None, str]:
        """The long option `name` (without `--`) names, or None with why."""
        exact = [o for o in self.long if o[0] == name]
        if exact:
            return exact[0], ""
        if not self.abbrev:
            return None, "is no option of"
        found = {o[2]: o for o in self.long if o[0].startswith(name)}
        if len(found) == 1:
            return next(iter(found.values())), ""
        return None, "is ambiguous for" if found else "is no option of"


def longs(flags: str = "", values: str = "", optional: str = "") -> tuple[tuple[str, int, str], ...]:
    """Long options from words `name` or `name/k` (k: the short letter it stands for) per has_arg."""
    out = []
    for has_arg, text in ((0, flags), (1, values), (2, optional)):
        for word in text.split():
            name, _, key = word.partition("/")
            out.append((name, has_arg, key or name))
    return tuple(out)


@dataclass(frozen=True)
class Wrapper:
    """A program that runs the command after its options (and its `positionals`) with what it changes."""

    names: tuple[str, ...]
    options: Options
    manual: str
    kind: str = "wrapper"
    positionals: tuple[str, ...] = ()  # words before the command (timeout's DURATION, taskset's mask)
    optional_positional: str = ""  # a word taken when it is all digits (chrt's priority, optional since 2.40)
    runs_nothing: frozenset[str] = frozenset()  # keys after which no command runs (-p PID, --show, --help)
    chdir: str = ""  # the key of the option that sets the working directory
    unset: str = ""  # the key of `-u NAME`
    clear: str = ""  # the key of the option that empties the environment
    split: str = ""  # env -S: its value is split into words that take its place
    assignments: bool = False  # NAME=VALUE words after the options set the environment (env)
    legacy_number: bool = False  # nice's `-N` / `--N` / `-+N` adjustment words
    not_followed: str = ""  # why the chain ends at this program (chroot: a new root)


def getopt(options: Options, words: list[str], i: int, prog: str, stop_at: re.Pattern | None = None
           ) -> tuple[list[tuple[str, str | None, int]], int, str | None]:
    """Options from words[i:] as GNU getopt_long reads a '+' string (argparse and clap alike for these tables):
    [(key, value, index after it)], the index of the first word that is no option, and an error, if any."""
    found: list[tuple[str, str | None, int]] = []
    while i < len(words):
        word = words[i]
        if word == "--":
            return found, i + 1, None
        if not word.startswith("-") or word == "-" or (stop_at is not None and stop_at.match(word)):
            return found, i, None
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            option, why = options.long_option(name)
            if option is None:
                return found, i, f"`{prog}`: --{name[:60]} {why} {prog}"
            if option[1] == 1 and not eq:
                if i + 1 >= len(words):
                    return found, i, f"{prog} option --{option[0]} has no value"
                value, i = words[i + 1], i + 1
            elif option[1] == 0 and eq:
                return found, i, f"{prog} option --{option[0]} takes no value"
            found.append((option[2], value if (eq or option[1] == 1) else None, i + 1))
            i += 1
            continue
        j = 1
        while j < len(word):
            letter = word[j]
            has_arg = options.short_arg(letter)
            if has_arg is None:
                return found, i, f"`{prog}`: -{letter} is no option of {prog}"
            if has_arg == 0:
                found.append((letter, None, i + 1))
                j += 1
                continue
            value = word[j + 1:]
            if has_arg == 1 and not value:
                if i + 1 >= len(words):
                    return found, i, f"{prog} option -{letter} has no value"
                value, i = words[i + 1], i + 1
            found.append((letter, value or None, i + 1))
            break
        i += 1
    return found, i, None


def shown(word: str) -> str:
    """A word as a sentence may name it: a plain name redaction leaves alone, else an ellipsis."""
    from .shape import entry_shown

    return repr(entry_shown(word[:200]))


HELP = "help version"
WRAPPERS: tuple[Wrapper, ...] = (
    Wrapper(("env",), Options("+a:C:iS:u:v0", longs(
        "ignore-environment/i null/0 list-signal-handling debug/v " + HELP,
        "argv0/a env0-from unset/u chdir/C split-string/S", "default-signal ignore-signal block-signal")),
        "GNU coreutils env(1) (src/env.c shortopts \"+a:C:iS:u:v0\")", chdir="C", unset="u", clear="i", split="S",
        assignments=True, runs_nothing=frozenset({"help", "version"})),
    Wrapper(("nice",), Options("+n:", longs(HELP, "adjustment/n")), "GNU coreutils nice(1) (src/nice.c \"+n:\")",
            legacy_number=True, runs_nothing=frozenset({"help", "version"})),
    Wrapper(("nohup",), Options("+", longs(HELP)), "GNU coreutils nohup(1) (parse_gnu_standard_options_only)",
            runs_nothing=frozenset({"help", "version"})),
    Wrapper(("stdbuf",), Options("+i:o:e:", longs(HELP, "input/i output/o error/e")),
            "GNU coreutils stdbuf(1) (src/stdbuf.c \"+i:o:e:\")", runs_nothing=frozenset({"help", "version"})),
    Wrapper(("timeout",), Options("+fk:ps:v", longs("foreground/f preserve-status/p verbose/v " + HELP,
                                                    "kill-after/k signal/s")),
            "GNU coreutils timeout(1) (src/timeout.c \"+fk:ps:v\")", positionals=("DURATION",),
            runs_nothing=frozenset({"help", "version"})),
    Wrapper(("chroot",), Options("+", longs("skip-chdir " + HELP, "groups userspec")),
            "GNU coreutils chroot(1)", not_followed="runs the command under a new root directory, which the doctor "
            "does not follow"),
    Wrapper(("time",), Options("+af:o:pqvV", longs("append/a portability/p quiet/q verbose/v help version/V",
                                                   "format/f output/o")),
            "GNU time 1.9 time(1) (time.c \"+af:o:pqvV\")", runs_nothing=frozenset({"help", "V"})),
    Wrapper(("taskset",), Options("+apchV", longs("all-tasks/a pid/p cpu-list/c help/h version/V")),
            "util-linux taskset(1) (schedutils/taskset.c \"+apchV\")", positionals=("MASK",),
            runs_nothing=frozenset({"p", "h", "V"})),
    Wrapper(("ionice",), Options("+n:c:p:P:u:tVh", longs("help/h ignore/t version/V",
                                                         "classdata/n class/c pid/p pgid/P uid/u")),
            "util-linux ionice(1) (schedutils/ionice.c \"+n:c:p:P:u:tVh\")",
            runs_nothing=frozenset({"p", "P", "u", "h", "V"})),
    Wrapper(("chrt",), Options("+abdD:efiphmoOP:T:rRU:X:GvV", longs(
        "all-tasks/a batch/b deadline/d deadline-overrun/O ext/e fifo/f idle/i pid/p help/h max/m other/o rr/r "
        "reset-on-fork/R reclaim-grub/G verbose/v version/V",
        "clamp-min/U clamp-max/X sched-runtime/T sched-period/P sched-deadline/D")),
        "util-linux chrt(1) (schedutils/chrt.c \"+abdD:efiphmoOP:T:rRU:X:GvV\")", optional_positional="PRIORITY",
        runs_nothing=frozenset({"p", "m", "h", "V"})),
    Wrapper(("setsid",), Options("+Vhcfw", longs("ctty/c fork/f wait/w version/V help/h")),
            "util-linux setsid(1) (sys-utils/setsid.c \"+Vhcfw\")", runs_nothing=frozenset({"h", "V"})),
    Wrapper(("numactl",), Options("+ai:w:p:P:c:N:C:m:slbHS:f:o:L:tM:dDI:uTV", longs(
        "all/a show/s localalloc/l balancing/b hardware/H strict/t dump/d dump-nodes/D huge/u touch/T cpu-compress "
        "verify/V version",
        "interleave/i weighted-interleave/w preferred/p preferred-many/P cpubind/c cpunodebind/N physcpubind/C "
        "membind/m shm/S file/f offset/o length/L shmmode/M shmid/I")),
        "numactl(8) (numactl.c opts[], get_short_opts: \"+ai:w:p:P:c:N:C:m:slbHS:f:o:L:tM:dDI:uTV\")",
        runs_nothing=frozenset({"s", "H", "S", "f", "I", "d", "D", "version"})),
    # Shell builtins: a job script's `exec python ...`, `command -p python ...`.
    Wrapper(("exec",), Options("+cla:", ()), "bash(1) builtin `exec [-cl] [-a name] [command [arguments]]` "
            "(POSIX.1-2017 exec)", kind="builtin", clear="c"),
    Wrapper(("command",), Options("+pvV", ()), "bash(1) builtin `command [-pVv] command [arg ...]` (POSIX.1-2017 "
            "command)", kind="builtin", runs_nothing=frozenset({"v", "V"})),
)

# Slurm 284c3b95, src/common/slurm_opt.c common_options[] (slurm_option_table_create: a '+' getopt string).
SRUN = Wrapper(("srun",), Options(
    "+A:b:D:M:C:S:c:d:Xm:e:x:B:G:hHI::i:J:K::lL:T:Zk::F:w:N:n:o:Osp:Eq:Qr:t:uvVW:", longs(
        "async consolidate-segments contiguous debugger-test disable-status/X exact help/h hold/H interactive "
        "label/l multi-prog no-allocate/Z overcommit/O oversubscribe/s parsable preserve-env/E quiet/Q "
        "quit-on-interrupt reboot spread-job spread-segments stepmgr test-only unbuffered/u use-min-nodes verbose/v "
        "version/V usage wait-for-children whole",
        "accel-bind account/A acctg-freq autocomplete bcast-exclude begin/b bb bbf cluster-constraint chdir/D "
        "cluster clusters/M comment container container-id context constraint/C core-spec/S cores-per-socket "
        "cpu-bind cpu_bind cpu-freq cpus-per-gpu cpus-per-task/c deadline delay-boot dependency/d distribution/m "
        "epilog error/e exclude/x export extra extra-node-info/B gpu-bind gpu-freq gpus/G gpus-per-node "
        "gpus-per-socket gpus-per-task gres gres-flags het-group hint ignore-signals input/i jobid job-name/J "
        "licenses/L mail-type mail-user threads/T mcs-label mem mem-bind mem-per-cpu mem-per-gpu mem-update "
        "mincpus mpi msg-timeout network nodefile/F nodelist/w nodes/N ntasks/n ntasks-per-core ntasks-per-gpu "
        "ntasks-per-node ntasks-per-socket ntasks-per-tres open-mode output/o pack-group partition/p prefer "
        "priority profile prolog qos/q relative/r resources reservation runtime segment signal slurmd-debug "
        "sockets-per-node switches task-epilog task-prolog tasks-per-node thread-spec threads-per-core time/t "
        "time-min tmp treewidth tres-bind tres-per-task wait/W wckey",
        "bcast compress exclusive external-launcher immediate/I kill-on-bad-exit/K nice no-kill/k oom-kill-step "
        "overlap propagate pty resv-ports send-libs")),
    "Slurm srun(1) (src/common/slurm_opt.c common_options[] at 284c3b95)", kind="launcher", chdir="D",
    runs_nothing=frozenset({"h", "usage", "V", "test-only", "autocomplete"}))
SBATCH = Wrapper(("sbatch",), Options(
    "+A:a:b:D:M:C:S:c:d:m:e:x:B:G:hHi:J:L:k::F:w:N:n:o:Osp:q:Qt:vVW", longs(
        "consolidate-segments contiguous external get-user-env help/h hold/H ignore-pbs no-requeue overcommit/O "
        "oversubscribe/s parsable quiet/Q reboot spread-job spread-segments stepmgr test-only use-min-nodes "
        "verbose/v version/V usage wait/W",
        "account/A acctg-freq array/a autocomplete batch begin/b bb bbf cluster-constraint chdir/D cluster "
        "clusters/M comment container container-id context constraint/C core-spec/S cores-per-socket cpu-freq "
        "cpus-per-gpu cpus-per-task/c deadline delay-boot dependency/d distribution/m error/e exclude/x export "
        "export-file extra extra-node-info/B gid gpu-bind gpu-freq gpus/G gpus-per-node gpus-per-socket "
        "gpus-per-task gres gres-flags hint input/i job-name/J kill-on-invalid-dep licenses/L mail-type mail-user "
        "mcs-label mem mem-bind mem-per-cpu mem-per-gpu mem-update mincpus network nodefile/F nodelist/w nodes/N "
        "ntasks/n ntasks-per-core ntasks-per-gpu ntasks-per-node ntasks-per-socket ntasks-per-tres open-mode "
        "output/o partition/p prefer priority profile qos/q resources reservation runtime segment signal "
        "sockets-per-node switches tasks-per-node thread-spec threads-per-core time/t time-min tmp tres-bind "
        "tres-per-task uid wait-all-nodes wckey wrap",
        "exclusive nice no-kill/k oom-kill-step propagate requeue resv-ports")),
    "Slurm sbatch(1) (src/common/slurm_opt.c common_options[] at 284c3b95; --wrap: \"wrap command string in a sh "
    "script and submit\")", kind="submitter", runs_nothing=frozenset({"h", "usage", "V", "test-only"}))

# `ray job submit [OPTIONS] -- ENTRYPOINT...` (Ray 2.x ray/dashboard/modules/job/cli.py `submit`, click options, plus
# add_common_job_options and the logging options): the entrypoint is shlex.join()ed and run with shell=True on the
# cluster's head node, so its words arrive as given.
RAY_SUBMIT = Options("v", longs(
    "no-wait verbose/v help",
    "address job-id submission-id runtime-env runtime-env-json metadata-json working-dir entrypoint-num-cpus "
    "entrypoint-num-gpus entrypoint-memory entrypoint-resources entrypoint-label-selector verify headers log-style "
    "log-color"), abbrev=False)
RAY_MANUAL = "Ray `ray job submit` (ray/dashboard/modules/job/cli.py: the entrypoint after `--` runs in a shell on " \
    "the head node)"

# torchrun / python -m torch.distributed.run (torch 2.13 torch/distributed/run.py get_args_parser, argparse with
# allow_abbrev; each option also read from PET_<NAME>): the training script, then its arguments (REMAINDER).
# torch.distributed.launch adds --use-env.
_TORCHRUN_VALUES = ("nnodes nproc-per-node rdzv-backend rdzv-endpoint rdzv-id rdzv-conf max-restarts monitor-interval "
                    "start-method event-log-handler role log-dir redirects/r tee/t local-ranks-filter "
                    "duplicate-stdout-filters duplicate-stderr-filters node-rank master-addr master-port local-addr "
                    "logs-specs numa-binding signals-to-handle shutdown-timeout")
_TORCHRUN_FLAGS = "help/h standalone module/m no-python run-path virtual-local-rank use-env"


def _both_spellings(text: str) -> str:
    """argparse's `--nproc-per-node` and `--nproc_per_node`, one key."""
    out = []
    for word in text.split():
        name, _, key = word.partition("/")
        key = key or name
        out += [f"{name}/{key}"] + ([f"{name.replace('-', '_')}/{key}"] if "-" in name else [])
    return " ".join(out)


TORCHRUN = Options("hmr:t:", longs(_both_spellings(_TORCHRUN_FLAGS), _both_spellings(_TORCHRUN_VALUES)))
TORCHRUN_MANUAL = "torchrun (torch/distributed/run.py get_args_parser; workers run `sys.executable -u SCRIPT`, or " \
    "PYTHON_EXEC)"
TORCHRUN_NAMES = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
# --nproc-per-node words the machine decides at launch (determine_local_world_size): not a number the doctor knows.
NPROC_WORDS = {"auto": "the accelerator count (or the CPU count)", "gpu": "the CUDA device count",
               "cuda": "the CUDA device count", "cpu": "the CPU count", "xpu": "the XPU device count"}

# uv 26a9dd4b crates/uv-cli/src/lib.rs: TopLevelArgs (CacheArgs, GlobalArgs) and RunArgs with its flattened groups
# (clap: no prefixes). `uv run [OPTIONS] [COMMAND]`: the first word that is no option starts the command.
UV = Options("Uhmnp:qsvVw:C:P:f:i:", longs(
    "active all-extras all-groups all-packages allow-python-downloads binary build build-isolation compile "
    "compile-bytecode dev editable exact force-reinstall frozen gui-script help/h inexact isolated locked "
    "managed-python module/m native-tls no-active no-all-extras no-binary no-build no-build-isolation no-cache/n "
    "no-cache-dir no-color no-compile no-compile-bytecode no-config no-default-groups no-dev no-editable no-env-file "
    "no-exact no-index no-installer-metadata no-managed-python no-native-tls no-offline no-preview no-progress "
    "no-project no_workspace/no-project no-python-downloads no-refresh no-reinstall no-sources no-sync "
    "no-system-certs no-upgrade offline only-dev pre preview quiet/q refresh reinstall script/s show-resolution "
    "show-settings system-certs upgrade/U verbose/v version/V",
    "allow-insecure-host cache-dir color config-file config-setting/C config-settings/C config-settings-package "
    "default-index directory env-file exclude-newer exclude-newer-package extra extra-index-url find-links/f "
    "fork-strategy group index index-strategy index-url/i keyring-provider link-mode max-recursion-depth "
    "no-binary-package no-build-isolation-package no-build-package no-editable-package no-extra no-group "
    "no-sources-package only-group package preview-feature preview-features project python/p python-fetch "
    "python-platform python-preference refresh-package reinstall-package resolution prerelease prerelease-package "
    "trusted-host upgrade-group upgrade-package/P with/w with-editable with-requirements"), abbrev=False)
UV_MANUAL = "uv run (uv 26a9dd4b: crates/uv-cli/src/lib.rs RunArgs; crates/uv-workspace/src/workspace.rs " \
    "VirtualProject::discover, environment_selection; docs/concepts/projects/config.md \"Project environment path\")"
# Options that make the interpreter another than the project environment's: not known.
UV_NOT_FOLLOWED = {"w": "--with layers an ephemeral environment over the project's",
                   "with-editable": "--with-editable layers an ephemeral environment over the project's",
                   "with-requirements": "--with-requirements layers an ephemeral environment over the project's",
                   "isolated": "--isolated runs in a temporary environment",
                   "p": "--python may replace the project environment's interpreter",
                   "no-project": "--no-project: uv searches for an interpreter itself",
                   "gui-script": "--gui-script runs pythonw (Windows)"}

# Shells whose `-c STRING [NAME [ARG...]]` the doctor reads (bash(1), dash(1), zsh(1): options before the string;
# `-o`/`+o` and bash's `-O`/`+O` take a value; -l, -i and --login read start-up files that may change the
# environment).
SHELLS = ("bash", "sh", "dash", "zsh", "ksh")
SHELL_VALUE_OPTIONS = {"-o", "+o", "-O", "+O", "--rcfile", "--init-file"}
SHELL_LONG_FLAGS = {"--login", "--norc", "--noprofile", "--posix", "--restricted", "--verbose", "--debugger",
                    "--dump-strings", "--dump-po-strings", "--noediting", "--help", "--version", "--pretty-print",
                    "--protected", "--wordexp"}
SHELL_MANUAL = "the shell's -c (bash(1) INVOCATION, POSIX.1-2017 sh -c command_string [command_name [argument...]])"

# CPython's command line (Python 3.12 `python --help`; Modules/main.c, Python/getopt.c): letters without a value,
# -W and -X with one, -c and -m end the options.
PYTHON_FLAG_LETTERS = set("bBdEhiIOPqsSuvVx?R")
PYTHON_VALUE_LETTERS = set("WX")
PYTHON_LONG = {"--help", "--version", "--help-env", "--help-xoptions", "--help-all"}
PYTHON_MANUAL = "CPython's command line (python(1); sys.path[0]: the docs' sys.path and -P, -I, PYTHONSAFEPATH)"
# The flags that change sys.path (passed on to the static probe as the job gives them).
PATH_FLAGS = frozenset("IEsSP")

# Programs the doctor knows and does not follow: their command runs elsewhere or under rules it does not read.
NOT_FOLLOWED = {
    "mpirun": "mpirun starts its ranks under its own rules", "mpiexec": "mpiexec starts its ranks under its own rules",
    "deepspeed": "the deepspeed launcher starts its ranks under its own rules",
    "accelerate": "accelerate launch starts its ranks under its own rules",
    "docker": "docker runs the command in a container", "podman": "podman runs the command in a container",
    "enroot": "enroot runs the command in a container", "singularity": "singularity runs the command in a container",
    "apptainer": "apptainer runs the command in a container", "xargs": "xargs builds the command from its input",
    "salloc": "salloc runs the command in a new allocation's shell", "sudo": "sudo runs the command as another user",
    "ssh": "ssh runs the command on another host", "uvx": "uvx runs a tool in its own environment",
    "python3-config": "not an interpreter",
}

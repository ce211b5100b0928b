"""The command line's prose: the description, each command's epilog (its exit codes) and the longer help texts."""

EXIT_CODES_HELP = (
    "Exit codes: 0 no check failed (warnings allowed unless --strict); 1 a check failed or errored (or warned, with "
    "--strict); 2 usage error (an --output that cannot be written included); 3 the doctor itself or a plugin crashed "
    "(the report is still written); 4 the report could not be written (stdout closed or full, or --output failing at "
    "the end: it went to stdout); 129/130/143 interrupted by SIGHUP/SIGINT/SIGTERM."
)
DESCRIPTION = ("Preflight checks for DeepSeek-V4 context-parallel training (verl + Megatron-Core + TE + cuDNN "
               "frontend). `check` is the default command.")
PREFLIGHT_EPILOG = ("The report goes to stderr (text), the job's stdout stays clean. Exit: the command's own exit code "
                    "when it ran (it replaces the doctor: same pid); 1 when a check failed (or warned, with --strict) "
                    "and the command did not start; 2 usage error; 129/130/143 interrupted.")
FLEET_EPILOG = ("`fleet --ray -- CMD` is `preflight --ray -- CMD`: the report of the driver and every GPU node goes to "
                "stderr; exit as preflight's (1 when any node failed, and the command did not start).")
SMOKE_EPILOG = ("Exit codes: 0 the smoke forward passed or was skipped; 1 it failed or errored; 2 usage error; 3 the "
                "doctor itself crashed (the report is still written); 4 the report could not be written (stdout "
                "closed or full, or --output failing at the end: it went to stdout); 129/130/143 interrupted by "
                "SIGHUP/SIGINT/SIGTERM.")
FIX_EPILOG = ("Exit codes: 0 a plan was printed (or nothing to fix); 1 some failure has no fix; 2 usage error; 3 the "
              "run behind the plan crashed; 4 the plan could not be written (stdout closed or full: nothing is "
              "applied); 129/130/143 interrupted. With --apply: the re-check's exit code.")
FIX_APPLY_HELP = ("Run the plan's pip steps with the target's pip (an externally managed interpreter's: in a "
                  "virtual environment, or with --break-system-packages), then re-check. Manual steps (torch) and job "
                  "settings are never run.")
FIX_BREAK_HELP = ("For an externally managed interpreter (PEP 668: Debian's and Ubuntu's python3), in an image you own "
                  "(a container): install into it with pip's --break-system-packages instead of a virtual "
                  "environment.")
FIX_VENV_HELP = ("For an externally managed interpreter (PEP 668): the virtual environment the pip steps install into, "
                 "made from it so that it sees its packages (default: .venv-dsv4 in the job's working directory); the "
                 "job then runs with DIR/bin/python.")
FIX_DOWNLOAD_HELP = ("On a connected machine: fetch what the plan's pip steps install into DIR (pip download of the "
                     "wheels and sdists; each git pin at its commit with its submodules, as an archive in DIR/git).")
FIX_FROM_HELP = ("Install from DIR alone (pip installs with no index, DIR its find-links folder; git pins from their "
                 "archives), as "
                 "`--download DIR` made it; a step whose artifact DIR lacks fails, naming it, and the rest go on.")
FIX_JOB_ARGS_HELP = ("The training command, as one shell-quoted string: the job.* checks run, and the plan ends with "
                     "the job's settings (CP_ARGS, export lines), as comments.")
TRIAGE_HELP = "Read a failed job's logs: where it failed first, and the known cause or only a symptom."
TRIAGE_PATHS_HELP = ("Log files, or folders whose every file is one stream (a rank's, a node's, a Ray worker's); "
                     "`-` or none: standard input.")
TRIAGE_EPILOG = ("It reads text only: nothing of the job is run or imported (docs/triage.md). Exit codes: 0 a triage "
                 "was printed, whatever its verdict; 2 usage error; 3 the doctor crashed (what it had is printed); "
                 "4 the output could not be written.")
WARM_EPILOG = ("Run as root after the stack is installed (the Dockerfile does); no GPU is needed. Exit codes: 0 the "
               "kernels were stored (or there was nothing to warm for the arch); 1 a kernel failed; 2 usage error.")
WARM_HELP = ("Compile the doctor's own CuTe DSL kernels for a GPU arch, without a GPU, into the image-wide kernel "
             "store that every user's check loads from.")

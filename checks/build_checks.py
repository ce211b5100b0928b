"""The toolchain the plan's build steps need (FlashMLA, fast-hadamard-transform, TE's torch extension compile against
torch with nvcc and a C++ compiler): checked before the plan runs them, only when it has any."""

from __future__ import annotations

from dsv4_doctor.api import (TORCH, Context, Phase, Probe, Result, Source, Status, UpstreamText, check, failed, passed,
                             skipped, warned)

from .fixes import toolchain as tc
from ._upstream import measured

# The checks whose fixes build against torch (a Phase.BUILD fix: TE, FlashMLA, fast-hadamard-transform, and the
# smokes, which hand out those rules' fixes): build.toolchain reads their outcomes (`after`), so it knows whether the
# plan has a build step. tests/test_build_toolchain.py holds this list to every built-in check that declares one.
BUILDS_AGAINST_TORCH = ("te.version", "te.import", "deps.consistency", "kernels.flash-mla", "kernels.fast-hadamard",
                        "smoke.thd-cp", "smoke.dsv4-kernels")
NVCC_TIMEOUT_S = 10.0
TOOLCHAIN = Probe.beside(__file__, "toolchain", "dsv4probe_toolchain.py", {"nvcc_timeout_s": NVCC_TIMEOUT_S})
PLANNED_TORCH_CUDA = "13.0"  # the CUDA of the torch the plan's manual step installs (torch 2.11.0, cu130)

CPP_EXTENSION = "https://github.com/pytorch/pytorch/blob/v2.13.0/torch/utils/cpp_extension.py"
TORCH_SOURCE = Source("PyTorch 2.13.0 torch/utils/cpp_extension.py (_find_cuda_home, _check_cuda_version, "
                      "library_paths, get_cxx_compiler, verify_ninja_availability)", CPP_EXTENSION)
NVCC_WHEEL = Source("nvidia-cuda-nvcc 13.0.88 on PyPI (nvidia/cu13/bin/nvcc; its nvcc.profile adds "
                    "-isystem $(TOP)/include/cccl)", "https://pypi.org/project/nvidia-cuda-nvcc/13.0.88/")
CCCL_WHEEL = Source("nvidia-cuda-cccl 13.0.85 on PyPI (nvidia/cu13/include/cccl)",
                    "https://pypi.org/project/nvidia-cuda-cccl/13.0.85/")
SOURCES = (
    TORCH_SOURCE, NVCC_WHEEL, CCCL_WHEEL,
    Source("CUDA 13.0 toolkit layout: include/cccl (cub, thrust, cuda/std), lib64/libcudart.so",
           "https://docs.nvidia.com/cuda/cuda-installation-guide-linux/"),
    Source("ninja on PyPI (`pip install ninja`, torch's own advice)", "https://pypi.org/project/ninja/"),
    measured("checks/fixes/toolchain.py", "Measured on this repository's CPU machine with the nvidia-cuda-nvcc 13.0.88 "
             "wheels: nvcc compiles, then `ld: cannot find -lcudart`; g++ without include/cccl stops at "
             "`cuda/std/utility: No such file or directory`"),
)
TEXTS = (
    UpstreamText("B1", "CUDA_HOME environment variable is not set. Please set it to your CUDA install root.",
                 TORCH_SOURCE, "OSError"),
    UpstreamText("B2", "CUDA was not found on the system, please set the CUDA_HOME or the CUDA_PATHenvironment "
                 "variable or add NVCC to your system PATH. The extension compilation will fail.", TORCH_SOURCE,
                 "RuntimeError"),
    UpstreamText("B3", "nvcc not found at '{nvcc}'. Ensure CUDA path '{cuda_home}' is correct.", TORCH_SOURCE,
                 "FileNotFoundError"),
    # Raised with its %s unfilled (RuntimeError(CUDA_MISMATCH_MESSAGE, version, torch.version.cuda)): recognised by
    # the parts that read the same either way.
    UpstreamText("B4", "The detected CUDA version (%s) mismatches the version that was used to compilePyTorch (%s). "
                 "Please make sure to use the same CUDA versions.", TORCH_SOURCE, "RuntimeError",
                 match=("The detected CUDA version (", ") mismatches the version that was used to compile")),
    UpstreamText("B5", "The detected CUDA version ({nvcc}) has a minor version mismatch with the version that was used "
                 "to compile PyTorch ({torch}). Most likely this shouldn't be a problem.", TORCH_SOURCE, "warning"),
    UpstreamText("B6", "Ninja is required to load C++ extensions (pip install ninja to get it)", TORCH_SOURCE,
                 "RuntimeError"),
    UpstreamText("B7", "Attempted to use ninja as the BuildExtension backend but we could not find ninja.. Falling "
                 "back to using the slow distutils backend.", TORCH_SOURCE, "warning"),
    UpstreamText("B8", "cuda/std/utility: No such file or directory", SOURCES[-1], "compiler-error"),
    UpstreamText("B9", "cannot find -lcudart", SOURCES[-1], "linker-error"),
)


def planned_builds(ctx: Context) -> tuple[list[str], bool]:
    """(the rows whose fixes the plan takes and that build against torch, whether any check that could ran)."""
    rows, ran = [], False
    for check_id in BUILDS_AGAINST_TORCH:
        other = ctx.outcome(check_id)
        if other is None:
            continue
        ran = True
        if other.status in (Status.FAIL, Status.WARN, Status.ERROR) and \
                any(getattr(f, "phase", None) is Phase.BUILD for f in other.fixes):
            rows.append(check_id)
    return rows, ran


def torch_cuda(ctx: Context) -> tuple[str | None, str]:
    """torch.version.cuda as the target reports it (the torch probe), or None and why it is not known."""
    probe = ctx.probe(TORCH)
    data = probe.data if probe.ok and isinstance(probe.data, dict) else None
    if data is None:
        return None, f"the torch probe gave no answer ({probe.error})"
    if not data.get("imported"):
        return None, "torch does not import (see torch.install)"
    cuda = tc.cuda_release(data.get("cuda_build"))
    if cuda is None:
        return None, f"torch {data.get('version')} is not a CUDA build (see torch.install)"
    return cuda, ""


def _part(data: dict, key: str) -> dict:
    """A section of the probe's answer, or {} when it is missing or not a mapping."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def judge(data: dict, cuda: str | None, cuda_unknown: str) -> list[tuple[Status, str, list]]:
    """The toolchain's problems: (status, what, fixes), from the probe's answer and torch's CUDA."""
    problems: list[tuple[Status, str, list]] = []
    want = cuda or PLANNED_TORCH_CUDA
    home, purelib = data.get("cuda_home"), data.get("purelib")
    nvcc = _part(data, "nvcc")
    if not home or not data.get("cuda_home_exists"):
        problems.append((Status.FAIL, f"no CUDA toolkit: CUDA_HOME resolves to {home or 'nothing'} "
                         f"({data.get('cuda_home_from')})", [tc.nvcc_wheels(want, purelib)]))
        return problems + _compiler_and_ninja(data)
    if nvcc.get("missing"):
        problems.append((Status.FAIL, f"no nvcc at {nvcc.get('path')} (CUDA_HOME={home}, from "
                         f"{data.get('cuda_home_from')})", [tc.nvcc_wheels(want, purelib)]))
    elif nvcc.get("release") is None:
        status = Status.FAIL if nvcc.get("timed_out") else Status.WARN  # torch runs it with no timeout: a hang
        problems.append((status, f"nvcc's version is not known: {nvcc.get('error')} ({nvcc.get('path')})", []))
    elif cuda is None:
        problems.append((Status.WARN, f"nvcc {nvcc['release']} at {nvcc.get('path')}; whether it matches torch's CUDA "
                         f"is not known: {cuda_unknown}", []))
    elif nvcc["release"].split(".")[0] != cuda.split(".")[0]:
        problems.append((Status.FAIL, f"nvcc {nvcc['release']} at {nvcc.get('path')} is another CUDA major than "
                         f"torch's CUDA {cuda}: torch stops the build (\"The detected CUDA version ... mismatches\")",
                         [tc.nvcc_wheels(cuda, purelib)]))
    elif nvcc["release"] != cuda:
        problems.append((Status.WARN, f"nvcc {nvcc['release']} and torch's CUDA {cuda} differ in the minor version "
                         "(torch warns and builds)", []))
    release = nvcc.get("release") or want
    cccl = _part(data, "cccl")
    cudart = _part(data, "cudart")
    guessed = str(data.get("cuda_home_from", "")).startswith("nvcc on PATH")
    # torch takes the folder above a PATH nvcc as it is (no realpath): /usr/local for a /usr/local/bin/nvcc wrapper.
    home_fix = [tc.set_cuda_home(f"torch took {home} from the {data.get('cuda_home_from')}")] if guessed else None
    if not nvcc.get("missing") and int(release.split(".")[0]) >= 13 and not cccl.get("exists"):
        wheel = str(home).rstrip("/").endswith(tc.WHEEL_HOME)
        problems.append((Status.FAIL, f"CUDA {release} without its CCCL headers: no {cccl.get('path')} (the host "
                         "compiler stops at `cuda/std/utility: No such file or directory`)",
                         home_fix or [tc.nvcc_wheels(release, purelib, cccl_only=True) if wheel
                                      else tc.cccl_package(release, home)]))
    if not nvcc.get("missing") and cudart and not cudart.get("linkable") and isinstance(cudart.get("elsewhere"), str):
        problems.append((Status.WARN, f"no libcudart.so in {cudart.get('dir')}; the linker finds "
                         f"{cudart['elsewhere']} instead (LIBRARY_PATH or a system folder): check that it is CUDA "
                         f"{nvcc.get('release') or 'of this nvcc'}'s", []))
    elif not nvcc.get("missing") and cudart and not cudart.get("linkable"):
        found = ", ".join(cudart.get("found") or []) or "no libcudart at all"
        problems.append((Status.FAIL, f"no libcudart.so in {cudart.get('dir')} ({found}): the extensions link "
                         "-lcudart", home_fix or [tc.link_cudart(cudart["dir"]) if cudart.get("found")
                                                  else tc.set_cuda_home(f"{home} has no libcudart")]))
    return problems + _compiler_and_ninja(data)


def _compiler_and_ninja(data: dict) -> list[tuple[Status, str, list]]:
    out: list[tuple[Status, str, list]] = []
    cxx = _part(data, "cxx")
    if not cxx.get("path"):
        origin = "$CXX" if cxx.get("from") == "CXX" else "the default (CXX unset)"
        out.append((Status.FAIL, f"no C++ compiler: {cxx.get('name')!r}, {origin}, is not on PATH", [tc.COMPILER]))
    ninja = _part(data, "ninja")
    if not ninja.get("path"):
        if ninja.get("in_scripts"):
            out.append((Status.WARN, f"ninja is in {ninja.get('scripts')}, which is not on PATH: torch falls back to "
                        "its slow serial backend", [tc.ninja_on_path(str(ninja.get("scripts")))]))
        else:
            out.append((Status.WARN, "no ninja on PATH: torch falls back to its slow serial backend (TE's build asks "
                        "for ninja)", [tc.ninja(ninja.get("scripts"), bool(ninja.get("scripts_on_path")))]))
    return out


@check(
    "build.toolchain",
    "The build steps' toolchain: nvcc matching torch's CUDA, CUDA_HOME, CCCL, a C++ compiler, ninja",
    applies_when="the fix plan builds against torch (TE, FlashMLA, fast-hadamard)",
    detects="CUDA_HOME as torch resolves it, `nvcc --version` (10 s limit), include/cccl, libcudart.so, $CXX/c++ and "
            "ninja on PATH, torch.version.cuda",
    sources=SOURCES,
    texts=TEXTS,
    # Skipped while torch itself fails: its CUDA is what nvcc must match, and the builds wait for its manual step.
    needs=("torch.install",),
    after=BUILDS_AGAINST_TORCH,
    fixes=(tc.nvcc_wheels(PLANNED_TORCH_CUDA), tc.COMPILER, tc.NINJA),
    probes=(TOOLCHAIN, TORCH),
)
def build_toolchain(ctx: Context) -> Result:
    """FlashMLA, fast-hadamard-transform and TE's torch extension are built by `pip install --no-build-isolation`
    against the installed torch, through torch.utils.cpp_extension: it takes CUDA_HOME (or CUDA_PATH, else the
    folder above the `nvcc` on PATH, else /usr/local/cuda), runs `$CUDA_HOME/bin/nvcc --version` and raises when its
    CUDA major differs from torch.version.cuda's, compiles with $CXX (else `c++`) and nvcc, links -lcudart from
    $CUDA_HOME/lib64 (or lib), and builds with ninja when `ninja --version` runs (else a slow serial fallback). CUDA
    13 moved CCCL (cub, thrust, cuda/std) to $CUDA_HOME/include/cccl, where nvcc looks and the host compiler does not.
    A missing piece fails minutes into the build; this rule names it first. A stdlib probe run by the target
    interpreter, in the doctor's environment (the one `fix --apply` runs pip in, and the shell that runs the fix
    script), repeats each lookup; nvcc runs with a 10 s limit and bounded output, so a hanging or babbling nvcc is
    "not known", never a hang. Fixes come first in the plan (phase toolchain, after PATH): pip installs ninja and,
    for CUDA 13, nvidia-cuda-nvcc and nvidia-cuda-cccl at torch's CUDA major.minor (CUDA_HOME then has to point at
    site-packages/nvidia/cu13, and libcudart.so has to be linked there by hand); a C++ compiler or a CUDA 12 toolkit
    is a manual step. It applies only when the plan builds something, and once torch.install passes (the builds wait
    for torch's step anyway, and its CUDA is what nvcc must match).
    """
    rows, ran = planned_builds(ctx)
    if ran and not rows:
        return skipped("no build step is planned: no failing or warning row among "
                       f"{', '.join(BUILDS_AGAINST_TORCH)} fixes by building against torch")
    data = ctx.require(TOOLCHAIN)
    if not isinstance(data, dict) or data.get("probe_error"):
        return warned("the toolchain is not known: its probe broke", evidence={"probe": data})
    cuda, why = torch_cuda(ctx)
    problems = judge(data, cuda, why)
    evidence = {"planned_builds": rows, "torch_cuda": cuda, "toolchain": data}
    asked = "" if rows else " (none of the checks whose fixes build ran: checked as asked)"
    if not problems:
        nvcc = _part(data, "nvcc")
        return passed(f"nvcc {nvcc.get('release')} at {nvcc.get('path')} matches torch's CUDA {cuda}; CUDA_HOME "
                      f"{data.get('cuda_home')} ({data.get('cuda_home_from')}); C++ compiler "
                      f"{_part(data, 'cxx').get('path')}; ninja {_part(data, 'ninja').get('path')}" + asked,
                      evidence=evidence)
    worst = Status.FAIL if any(s is Status.FAIL for s, _, _ in problems) else Status.WARN
    fixes = list({f.key: f for _, _, fs in problems for f in fs}.values())  # one step each, as a plan keeps it
    for_what = f"the build steps of {', '.join(rows)}" if rows else "a build against torch"
    summary = f"{for_what} would fail or stall: " + "; ".join(text for _, text, _ in problems) + asked
    details = ("torch.utils.cpp_extension builds FlashMLA, fast-hadamard-transform and TE's extension: CUDA_HOME "
               f"{data.get('cuda_home')} (from {data.get('cuda_home_from')}), torch's CUDA {cuda or why}.")
    return (failed if worst is Status.FAIL else warned)(summary, details, fixes=fixes, evidence=evidence)


CHECKS = [build_toolchain]

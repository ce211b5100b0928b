"""The cuDNN and NCCL torch really loads, against what the nvidia-* wheels' metadata says is installed."""

from __future__ import annotations

import os

from dsv4_doctor.api import TORCH, Context, Result, Source, StaticRequest, check, passed, skipped, version, warned

WHEELS = {"libcudnn.so": ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12"), "libnccl.so": ("nvidia-nccl-cu13",
                                                                                   "nvidia-nccl-cu12")}
LABEL = {"libcudnn.so": "cuDNN", "libnccl.so": "NCCL"}
STATIC = StaticRequest(distributions=tuple(n for names in WHEELS.values() for n in names))


def cudnn_version(value) -> str | None:
    """torch.backends.cudnn.version(): 91900 is 9.19.0 (cuDNN 9: M*10000+m*100+p); 8907 is 8.9.7 (cuDNN 8)."""
    if not isinstance(value, int) or value <= 0:
        return None
    if value >= 90000:
        return f"{value // 10000}.{value % 10000 // 100}.{value % 100}"
    return f"{value // 1000}.{value % 1000 // 100}.{value % 100}"


def _same_release(loaded: str | None, wheel: str | None) -> bool | None:
    a, b = version(loaded), version(wheel)
    if a is None or b is None:
        return None
    return a.release[:3] == b.release[:3]


def _family(name: str, loaded_version: str | None, data: dict, static) -> tuple[list[str], dict]:
    loaded = [p for p in (data.get("loaded_libraries") or {}).get(name, []) if isinstance(p, str)]
    on_disk = [c for c in (data.get("libraries_on_disk") or {}).get(name, []) if isinstance(c, dict)]
    wheel = next(((n, static.readable_dist(n)) for n in WHEELS[name] if static.readable_dist(n)), (None, None))
    wheel_name, wheel_dist = wheel
    wheel_version = wheel_dist.get("version") if wheel_dist else None
    real_loaded = sorted({os.path.realpath(p) for p in loaded})
    wheel_dir = f"{os.sep}nvidia{os.sep}{'cudnn' if 'cudnn' in name else 'nccl'}{os.sep}lib{os.sep}"
    evidence = {"loaded_version": loaded_version, "loaded": loaded, "wheel": wheel_name, "wheel_version": wheel_version,
                "on_disk": [c.get("path") for c in on_disk]}
    problems = []
    label = LABEL[name]
    if len(real_loaded) > 1:
        problems.append(f"two copies of {label} are loaded in one process: {', '.join(real_loaded)}")
    if wheel_name and loaded and not any(wheel_dir in p for p in loaded):
        problems.append(f"{wheel_name} {wheel_version} is installed, but torch loaded {label} from {loaded[0]}")
    if wheel_name and _same_release(loaded_version, wheel_version) is False:
        problems.append(f"torch runs {label} {loaded_version}, but the installed {wheel_name} is {wheel_version}")
    others = [c.get("path") for c in on_disk if os.path.realpath(str(c.get("path"))) not in real_loaded]
    distinct_dirs = {os.path.dirname(os.path.realpath(str(c.get("path")))) for c in on_disk}
    if len(distinct_dirs) > 1:
        problems.append(f"{label} is installed in {len(distinct_dirs)} places ({', '.join(sorted(distinct_dirs))}): "
                        "which one loads depends on the loader's search order")
    evidence["other_copies"] = others
    return problems, evidence


@check(
    "libs.loaded",
    "The cuDNN and NCCL torch loads are the installed ones",
    applies_when="torch imports as a CUDA build",
    detects="torch.backends.cudnn.version(), torch.cuda.nccl.version(), /proc/self/maps, copies on disk",
    sources=(
        Source("pytorch #78489: collect_env reports ldconfig's cuDNN, not the loaded one",
               "https://github.com/pytorch/pytorch/issues/78489"),
        Source("cudnn-frontend collect_env.py (loaded vs installed: the most common unreproducible-issue root cause)",
               "https://github.com/NVIDIA/cudnn-frontend/blob/main/python/cudnn/collect_env.py"),
        Source("TransformerEngine README, Troubleshooting (CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED)",
               "https://github.com/NVIDIA/TransformerEngine#troubleshooting"),
    ),
    needs=("torch.install",),
    static=STATIC,
    probes=(TORCH,),
)
def libs_loaded(ctx: Context) -> Result:
    """Installed is not loaded. In the torch probe, after torch reports `torch.backends.cudnn.version()` and
    `torch.cuda.nccl.version()`, the probe reads its own /proc/self/maps for the libcudnn and libnccl files it
    mapped and lists every copy on disk (the nvidia-* wheels' folders, LD_LIBRARY_PATH, CUDA_HOME and the
    system folders). It warns when the loaded version differs from the nvidia-cudnn-cu13/-cu12 or
    nvidia-nccl-cu13/-cu12 wheel's metadata, when torch loaded a copy other than the wheel's, when two copies
    are mapped at once, or when the library is installed in more than one place (verl's image installs an apt
    cuDNN beside nvidia-cudnn-cu13, and overrides nvidia-nccl-cu13 over torch's pin).
    """
    probe = ctx.probe(TORCH)
    data = probe.data if probe.ok and isinstance(probe.data, dict) else {}
    if not data.get("imported"):
        return skipped("torch does not import, so nothing is loaded (see torch.install)")
    if not data.get("cuda_build"):
        return skipped(f"torch {data.get('version')} is a CPU build: it loads no cuDNN or NCCL (see torch.install)")
    if data.get("libraries_error"):
        return warned(f"the loaded libraries could not be read: {data['libraries_error']}")
    static = ctx.static
    cudnn = cudnn_version(data.get("cudnn_version"))
    nccl = data.get("nccl_version") if isinstance(data.get("nccl_version"), str) else None
    problems_c, ev_c = _family("libcudnn.so", cudnn, data, static)
    problems_n, ev_n = _family("libnccl.so", nccl, data, static)
    evidence = {"cudnn": ev_c, "nccl": ev_n}
    problems = problems_c + problems_n
    if problems:
        return warned("; ".join(problems),
                      "The version torch reports and the file it mapped are what the job runs; the wheel metadata is "
                      "what pip installed. verl's image installs an apt cuDNN beside nvidia-cudnn-cu13 and overrides "
                      "NCCL over torch's pin; TE built against one cuDNN and loading another fails with "
                      "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED.", evidence=evidence)
    where_c = f" from {ev_c['loaded'][0]}" if ev_c["loaded"] else ""
    where_n = f" from {ev_n['loaded'][0]}" if ev_n["loaded"] else ""
    return passed(f"torch loads cuDNN {cudnn or 'unknown'}{where_c} and NCCL {nccl or 'unknown'}{where_n}, as "
                  "installed", evidence=evidence)

CHECKS = [libs_loaded]

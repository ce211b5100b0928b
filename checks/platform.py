"""Platform: the target interpreter."""

from __future__ import annotations

from dsv4_doctor.model import Check, Fix, Source, failed, passed
from dsv4_doctor.probes import StaticRequest

SUPPORTED_PYTHON = Fix(
    "Use a Python 3.12 image (the verl image and the NGC PyTorch containers the DSv4 recipes use ship 3.12)", [])


def _python_version(ctx):
    py = ctx.static.python
    info = py.get("version_info") or [0, 0, 0]
    version = py.get("version")
    evidence = {"version": version, "executable": py.get("executable"), "implementation": py.get("implementation")}
    if (info[0], info[1]) >= (3, 12):
        return passed(f"Python {version}", **evidence)
    if (info[0], info[1]) >= (3, 10):
        return passed(
            f"Python {version} (Megatron-LM dev allows >= 3.10; released megatron-core wheels need 3.12)",
            "Megatron-LM dev, the only source of dsv4_hybrid, declares requires-python >=3.10, so a dev install runs "
            "here. Released megatron-core wheels (>= 0.17) declare >=3.12, and the reference DSv4 images ship 3.12.",
            **evidence,
        )
    return failed(f"Python {version} is older than 3.10, the oldest Megatron-LM dev supports",
                  fixes=[SUPPORTED_PYTHON], **evidence)


python_version = Check(
    id="python.version",
    title="Python version of the target interpreter",
    explanation="""
        Megatron-LM `dev`, the only branch with the dsv4_hybrid attention, declares `requires-python >=3.10`;
        older interpreters cannot run it (a failure). Released megatron-core wheels (0.17 and later) declare
        `Requires-Python >=3.12`, and the verl image and the NGC PyTorch containers the Megatron DSv4 recipes use
        ship Python 3.12, so 3.12 is the tested choice; 3.10 and 3.11 pass with that note.
    """,
    applies_when="always",
    detects="sys.version_info of the target interpreter",
    sources=(
        Source("Megatron-LM dev pyproject.toml (requires-python >=3.10)",
               "https://github.com/NVIDIA/Megatron-LM/blob/dev/pyproject.toml"),
        Source("megatron-core 0.19.2 METADATA (Requires-Python >=3.12)", "https://pypi.org/project/megatron-core/0.19.2/"),
        Source("verl docker/Dockerfile.stable.vllm (Python 3.12)", "https://github.com/verl-project/verl"),
    ),
    fixes=(SUPPORTED_PYTHON,),
    static=StaticRequest(),
    run=_python_version,
)

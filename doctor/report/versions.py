"""The versions block: what was found (Python, torch and its CUDA, the driver, the GPUs, and each package of the DSv4
stack), first in every report, as torch's collect_env and DeepSpeed's ds_report print theirs, and alone for
`check --versions`.

`gather` builds it once per run (report/assemble.py, into `environment.versions`) from what the run already read: the
static probe's facts (each distribution's version, where the module the job imports lies, its git commit, the cubins
of FlashMLA's extension), nvidia-smi's rows, and the torch row's import (CUDA, cuDNN, NCCL). A report read back from
a file without the block has it rebuilt from its rows' evidence (`of_report`). An entry's `state` says whether its
fact was found, is absent, was not checked (its source did not run) or is not known: nothing is ever guessed.

Every value came from the inspected environment and is hostile: the text lines are cleaned (no escapes, no control
characters), each value capped so that the block fits `MAX_LINES` lines of `WIDTH` columns, broken only between
values; markdown escapes each value (report/markdown.py's `plain`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..model.facts import StaticFacts

if TYPE_CHECKING:
    from ..model.report import Report

WIDTH, MAX_LINES = 80, 4  # the block fits MAX_LINES lines at WIDTH columns (check --versions prints it so)
MAX_WIDTH = 120  # a wider report packs it at most this wide
FOUND, ABSENT, NOT_CHECKED, NOT_KNOWN = "found", "absent", "not_checked", "not_known"
# Each entry's key in `environment.versions` and its label in the text and markdown block, in the block's order.
LABELS = {"python": "Python", "torch": "torch", "cuda": "CUDA", "cudnn": "cuDNN", "nccl": "NCCL", "driver": "driver",
          "gpus": "GPU", "transformer_engine": "TE", "cudnn_frontend": "cuDNN-FE", "cute_dsl": "CuTe-DSL",
          "tvm_ffi": "tvm-ffi", "megatron_core": "mcore", "megatron_bridge": "mbridge", "verl": "verl",
          "flash_mla": "FlashMLA"}
# The stack's packages: their distributions (the first installed one's version is shown) and the module the job
# imports, as the checks name them.
PACKAGES = {
    "transformer_engine": (("transformer-engine", "transformer-engine-torch", "transformer-engine-cu13",
                            "transformer-engine-cu12"), "transformer_engine", "te.version"),
    "cudnn_frontend": (("nvidia-cudnn-frontend",), "cudnn", "cudnn-fe.version"),
    "cute_dsl": (("nvidia-cutlass-dsl",), "cutlass", "cutlass-dsl.import"),
    "tvm_ffi": (("apache-tvm-ffi",), "tvm_ffi", "tvm-ffi.version"),
    "megatron_core": (("megatron-core",), "megatron.core", "mcore.dsv4"),
    "megatron_bridge": (("megatron-bridge",), "megatron.bridge", "mbridge.dsv4"),
    "verl": (("verl",), "verl", "verl.cp-layout"),
    "flash_mla": (("flash-mla", "flash_mla"), "flash_mla", "kernels.flash-mla"),
}
NO_STATIC = "the static probe gave no answer"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _entry(state: str, version: str | None = None, why: str | None = None, **extra: Any) -> dict:
    return {"state": state, "version": version, "why": why, **extra}


def _cudnn(value: Any) -> str | None:
    """torch.backends.cudnn.version() as a release: 91900 is 9.19.0 (cuDNN 9: M*10000+m*100+p), 8907 is 8.9.7."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        return None
    major, rest = (value // 10000, value % 10000) if value >= 90000 else (value // 1000, value % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _archs(device_code: Any) -> list[str]:
    """The archs of a module's device code (cubins, then PTX), from the static probe's fatbin read."""
    objects = device_code.get("objects") if isinstance(device_code, dict) else None
    found: list[str] = []
    for obj in objects if isinstance(objects, list) else []:
        for kind, prefix in (("cubins", ""), ("ptx", "ptx ")):
            for part in obj.get(kind) or [] if isinstance(obj, dict) else []:
                arch = _text(part.get("arch")) if isinstance(part, dict) else None
                if arch and prefix + arch not in found:
                    found.append(prefix + arch)
    return found[:16]


# ------------------------------------------------------------------------------------------------------ gathering

def gather(rows: Mapping[str, Any], target: Mapping[str, Any], static: dict | None = None,
           gpus: Sequence[dict] | None = None) -> dict:
    """The block's entries. `rows`: check id -> row (a CheckReport: status, summary, evidence); `static`: the static
    probe's answer (None where it gave none, or for a report read back); `gpus`: nvidia-smi's rows (None: not
    given, then read from the gpu rows' evidence)."""
    facts = StaticFacts(static) if static else None
    executable = _text(target.get("executable"))
    out = {"python": _entry(FOUND, _text(target.get("version")), executable=executable)
           if _text(target.get("version")) else _entry(NOT_KNOWN, why="the interpreter gave no version",
                                                       executable=executable)}
    out.update(_torch(rows, facts))
    out.update(_gpus(rows, gpus))
    for key in PACKAGES:
        out[key] = _package(key, facts) if facts is not None else _package_of_row(key, rows)
    return out


def _evidence(rows: Mapping[str, Any], check_id: str) -> dict:
    row = rows.get(check_id)
    evidence = getattr(row, "evidence", None)
    return evidence if isinstance(evidence, dict) else {}


def _not_run(rows: Mapping[str, Any], check_id: str) -> str:
    row = rows.get(check_id)
    if row is None:
        return f"{check_id} did not run"
    return f"{check_id}: {getattr(row, 'summary', '') or getattr(row.status, 'value', 'no answer')}"


def _torch(rows: Mapping[str, Any], facts: StaticFacts | None) -> dict:
    """torch from its import (torch.install: its version, CUDA, the cuDNN and NCCL it loaded), else its metadata."""
    ev = _evidence(rows, "torch.install")
    if _text(ev.get("version")):
        cuda = _text(ev.get("cuda_build"))
        return {"torch": _entry(FOUND, ev["version"]),
                "cuda": _entry(FOUND, cuda) if cuda else _entry(ABSENT, why="torch is a CPU-only build"),
                "cudnn": _entry(FOUND, _cudnn(ev.get("cudnn_version")), raw=ev.get("cudnn_version"))
                if _cudnn(ev.get("cudnn_version")) else _entry(ABSENT, why="torch loaded no cuDNN"),
                "nccl": _entry(FOUND, str(ev["nccl_version"])) if _text(ev.get("nccl_version"))
                else _entry(ABSENT, why="torch has no NCCL")}
    error = ev.get("error") if isinstance(ev.get("error"), dict) else None
    installed = facts.version("torch") if facts is not None else None
    if error and error.get("missing_module") == "torch" or (facts is not None and not facts.dist_copies("torch")):
        absent = _entry(ABSENT, why="torch is not installed")
        return {"torch": absent, "cuda": absent, "cudnn": absent, "nccl": absent}
    why = (f"import torch raised {error.get('type')}" if error else _not_run(rows, "torch.install"))
    late = _entry(NOT_KNOWN if error else NOT_CHECKED, why=why)
    torch = _entry(FOUND, installed) if installed else _entry(NOT_CHECKED, why=NO_STATIC if facts is None else why)
    return {"torch": torch, "cuda": late, "cudnn": late, "nccl": late}


def _gpus(rows: Mapping[str, Any], gpus: Sequence[dict] | None) -> dict:
    """The driver and the GPUs, from nvidia-smi (its rows, or as the gpu rows kept them)."""
    if gpus is None:
        listed = _evidence(rows, "gpu.devices").get("nvidia_smi")
        if not isinstance(listed, list):
            why = _not_run(rows, "gpu.devices")
            return {"driver": _entry(NOT_CHECKED, why=why), "gpus": _entry(NOT_CHECKED, why=why)}
        gpus = [g for g in listed if isinstance(g, dict)]
    if not gpus:
        return {"driver": _entry(NOT_KNOWN, why="nvidia-smi listed no GPU (or is not there)"),
                "gpus": _entry(ABSENT, why="nvidia-smi listed none (or is not there)", count=0, names=[])}
    names = [str(g.get("name") or "unknown GPU") for g in gpus]
    driver = _text(gpus[0].get("driver_version"))
    return {"driver": _entry(FOUND, driver) if driver else _entry(NOT_KNOWN, why="nvidia-smi gave no driver version"),
            "gpus": _entry(FOUND, count=len(names), names=names,
                           capabilities=[g.get("compute_capability") for g in gpus])}


def _package(key: str, facts: StaticFacts) -> dict:
    """A stack package from the static facts: the version of the copy the job imports, and where that copy is."""
    dists, module, _ = PACKAGES[key]
    copy = facts.copy(module)
    installed = [d for d in dists if facts.dist_copies(d)]
    if not installed and not copy["found"]:
        return _entry(ABSENT, why="not installed")
    version = next((v for v in (facts.version(d) for d in installed) if v), None) or copy["version"]
    entry = _entry(FOUND, version, None if version else "no metadata or file states its version")
    if key in ("megatron_core", "flash_mla"):
        dist = facts.dist(installed[0]) if installed else None
        url = (dist or {}).get("direct_url")
        vcs = url.get("vcs_info") if isinstance(url, dict) else None
        git = (copy["git"] or {}).get("commit")
        entry["commit"] = _text(git) or (_text(vcs.get("commit_id")) if isinstance(vcs, dict) else None)
    if key == "megatron_core":
        owner = copy["owner"] or {}
        entry.update(copy=copy["why"], path=copy["root"] or _text(owner.get("checkout")), place=copy["place"])
    if key == "flash_mla":
        entry["archs"] = _archs(facts.device_code(module))
    return entry


def _package_of_row(key: str, rows: Mapping[str, Any]) -> dict:
    """A stack package from its check's evidence (a report read back from a file: no static facts)."""
    check_id = PACKAGES[key][2]
    ev, row = _evidence(rows, check_id), rows.get(check_id)
    if key == "cudnn_frontend":
        listed = ev.get("distribution")
        version = _text(ev.get("import_version")) or (_text(listed[0]) if isinstance(listed, list) and listed else None)
    elif key == "cute_dsl":
        dists = ev.get("distributions")
        version = _text(dists.get("nvidia-cutlass-dsl")) if isinstance(dists, dict) else None
    elif key == "megatron_core":
        version = _text(ev.get("distribution")) or _text(ev.get("files_version"))
    else:
        version = _text(ev.get("version"))
    located = any(isinstance(ev.get(k), str) for k in ("module", "megatron.core", "import_origin"))
    if version is None and not located:
        summary = str(getattr(row, "summary", "") or "")
        if row is not None and getattr(row.status, "value", "") == "fail" and "not installed" in summary:
            return _entry(ABSENT, why="not installed")
        return _entry(NOT_CHECKED if not ev else NOT_KNOWN, why=_not_run(rows, check_id))
    entry = _entry(FOUND, version, None if version else f"{check_id} found the module, not its version")
    if key == "megatron_core":
        vcs = ev["vcs"] if isinstance(ev.get("vcs"), dict) else {}
        entry["commit"] = (_text(ev.get("git_commit")) if ev.get("checkout") else None) or _text(
            vcs.get("commit_id")) or _text(ev.get("git_commit"))
        origin = _text(ev.get("megatron.core"))
        entry.update(copy=_text(ev.get("imported_copy")), place=None,
                     path=_text(ev.get("checkout")) or (origin.rsplit("/megatron/", 1)[0] if origin else None))
    if key == "flash_mla":
        entry.update(commit=None, archs=_archs(ev.get("device_code")))
    return entry


def of_report(report: Report) -> dict:
    """The report's block: the one its run gathered, or rebuilt from its rows (a report from before the block)."""
    block = report.environment.get("versions")
    if isinstance(block, dict) and block:
        return block
    return gather({c.id: c for c in report.checks}, report.target_python)


# ------------------------------------------------------------------------------------------------------- rendering

def _clean(value: Any) -> str:
    from ..hostio.validtext import clean_text

    return clean_text(" ".join(str(value).split()))


def _capped(value: Any, cap: int, keep_tail: bool = False) -> str:
    """A hostile value in one line of at most `cap` characters ("..." where cut; a path keeps its end)."""
    text = _clean(str(value)[-(cap * 4 + 64):] if keep_tail else str(value)[:cap * 4 + 64])  # an escape: 4 chars
    if len(text) <= cap:
        return text
    return "..." + text[len(text) - cap + 3:] if keep_tail else text[:cap - 3] + "..."


def _found(key: str, entry: Mapping[str, Any], cap: int) -> str:
    label = LABELS[key]
    if key == "gpus":
        names: dict[str, int] = {}
        for name in entry.get("names") or []:
            names[str(name)] = names.get(str(name), 0) + 1
        return "GPU " + ", ".join(f"{n}x {_capped(name, cap)}" for name, n in list(names.items())[:3]) + (
            ", ..." if len(names) > 3 else "")
    version = entry.get("version")
    text = f"{label} {_capped(version, max(cap, 8))}" if version else f"{label} version not known"
    if key == "python" and entry.get("executable") and cap > 0:
        text += f" ({_capped(entry['executable'], max(cap, 12), keep_tail=True)})"
    if entry.get("commit"):
        text += f" @{_capped(str(entry['commit'])[:8], cap)}"
    if key == "megatron_core" and entry.get("place") != "site" and (entry.get("path") or entry.get("copy")):
        text += f" ({_capped(entry.get('path') or entry.get('copy'), max(cap, 12), keep_tail=True)})"
    if entry.get("archs"):
        text += " " + _capped(",".join(str(a) for a in entry["archs"]), cap)
    return text


def _fields(block: Mapping[str, Any], caps: Mapping[str, int]) -> list[tuple[str, list[str]]]:
    """The block as (key, atoms) fields: a line breaks between atoms (a group's names), never inside one. `caps`: the
    most characters each key's values may take."""
    fields: list[tuple[str, list[str]]] = []
    groups: dict[str, list[str]] = {ABSENT: [], NOT_CHECKED: [], NOT_KNOWN: []}
    torch_absent = isinstance(block.get("torch"), dict) and block["torch"].get("state") == ABSENT
    for key, label in LABELS.items():
        entry = block.get(key)
        state = entry.get("state") if isinstance(entry, dict) else NOT_KNOWN
        if state == FOUND:
            fields.append((key, [_found(key, entry, caps.get(key, 48))]))  # type: ignore[arg-type]
        elif state == ABSENT and (key in PACKAGES or key == "torch"):
            groups[ABSENT].append(label)
        elif state == ABSENT and key in ("cuda", "cudnn", "nccl"):
            if not torch_absent:
                fields.append((key, [f"{label} none"]))
        elif state == ABSENT:
            fields.append((key, [f"{label} none seen" if key == "gpus" else f"{label} none"]))
        else:
            groups[state if state in groups else NOT_KNOWN].append(label)
    if len(groups[ABSENT]) == len(PACKAGES) + 1:  # torch and every package: a fresh environment, said short
        groups[ABSENT] = []
        fields.append((ABSENT, ["none of the stack installed"]))
    for state, head in ((ABSENT, "not installed: "), (NOT_CHECKED, "not checked: "), (NOT_KNOWN, "not known: ")):
        if groups[state]:
            fields.append((state, [head + groups[state][0], *groups[state][1:]]))
    return fields


def _pack(fields: list[tuple[str, list[str]]], width: int) -> list[str]:
    lines: list[str] = []
    line = ""
    for _, atoms in fields:
        for i, atom in enumerate(atoms):
            sep = ", " if i else "; "
            if line and len(line) + len(sep) + len(atom) > width:
                lines.append(line + (sep.rstrip() if i else ""))
                line = atom
            else:
                line = line + sep + atom if line else atom
    return lines + ([line] if line else [])


def text_lines(block: Mapping[str, Any], width: int = WIDTH, max_lines: int = MAX_LINES) -> list[str]:
    """The block as at most `max_lines` lines of at most `width` columns (40 to MAX_WIDTH; narrower than WIDTH, as
    many characters on more lines), a line broken only between values. The interpreter's path is shown where it
    costs no line (the JSON always has it); while the block takes more, the longest value is cut shorter ("...";
    a path keeps its end)."""
    width = max(40, min(width, MAX_WIDTH))
    if width < WIDTH:  # a narrow terminal: as many characters as MAX_LINES lines at WIDTH, on more lines
        max_lines = -(-max_lines * WIDTH // width)
    caps: dict[str, int] = {}
    with_path, without = _pack(_fields(block, caps), width), _pack(_fields(block, {"python": 0}), width)
    if len(with_path) > len(without) or max(map(len, with_path)) > width:
        caps["python"] = 0  # the version stays: a cap of 0 leaves only the path out
    for _ in range(64):
        fields = _fields(block, caps)
        lines = _pack(fields, width)
        if len(lines) <= max_lines and max(map(len, lines)) <= width:
            return lines
        key, atoms = max((f for f in fields if f[0] in LABELS and f[0] != "python" and caps.get(f[0], 48) > 8),
                         key=lambda f: len(f[1][0]), default=(None, []))  # the longest value, cut shorter
        if key is None:
            break
        caps[key] = min(caps.get(key, 48), len(atoms[0])) - 4
    kept = [line if len(line) <= width else line[:width - 4] + " ..." for line in lines[:max_lines]]
    return kept if len(lines) <= max_lines else kept[:-1] + [kept[-1][:width - 4] + " ..."]


def report_lines(report: Report, width: int = WIDTH) -> list[str]:
    """The report's block as its text shows it."""
    return text_lines(of_report(report), width)


def markdown_lines(report: Report) -> list[str]:
    """The block for markdown: its text lines in a fence longer than any backtick run in them (values are hostile:
    inside a fence nothing is markup), then a blank line."""
    lines = report_lines(report)
    longest = max((len(run) for line in lines for run in line.replace("`", " ` ").split() if set(run) == {"`"}),
                  default=0)
    ticks = "`" * max(3, longest + 1)
    return [ticks + "text", *lines, ticks, ""]

"""Distribution metadata of the DSv4 packages: readable, so that versions can be judged at all."""

from __future__ import annotations

from dsv4_doctor.model import Check, Context, Fix, Phase, Result, Source, passed, warned


def _metadata(ctx: Context) -> Result:
    static = ctx.static
    broken = static.unreadable()
    evidence = {"unreadable": broken}
    if not broken:
        return passed("every inspected distribution's METADATA reads", evidence=evidence)
    names = sorted({k.split(" (")[0] for k in broken})
    fix = Fix("Reinstall " + ", ".join(names) + " (their METADATA is unreadable: pip and importlib.metadata cannot "
              "see their versions)", key="setting:reinstall-broken-metadata", phase=Phase.SETTING)
    return warned(
        f"unreadable METADATA: {', '.join(f'{k}: {v}' for k, v in broken.items())}",
        "Other checks judge what they can from the copies that read; a version that cannot be read at all is "
        "reported by the check that needs it. Megatron reads versions with importlib.metadata too (TE's packing "
        "gate), so the job may not see what pip installed.",
        fixes=[fix], evidence=evidence)


deps_metadata = Check(
    id="deps.metadata",
    title="The DSv4 packages' metadata is readable",
    explanation="""
        Every version this doctor judges comes from a distribution's METADATA, as pip and Megatron read it. An
        empty, truncated or non-UTF-8 METADATA file (a half-finished install, a copied site-packages) makes a
        version unreadable. That is its own finding: it never lowers the verdict of another check, which judges the
        copies that do read (or says it cannot tell).
    """,
    applies_when="always",
    detects="importlib.metadata of every distribution the checks inspect",
    sources=(Source("pip operations/check.py: don't crash on unreadable or broken metadata",
                    "https://github.com/pypa/pip/blob/main/src/pip/_internal/operations/check.py"),),
    run=_metadata,
)

CHECKS = [deps_metadata]

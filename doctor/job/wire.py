"""Reading a job as the report carries it (`profile.job`, a dict)."""

from __future__ import annotations

from typing import Any


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def roles_to_check(job: dict) -> list[str]:
    """The roles whose models a job builds: Megatron's one model; verl's actor, and ref/critic when they state
    settings of their own (verl's ref otherwise inherits the actor's)."""
    roles = _dict(job.get("roles"))
    if job.get("kind") == "megatron":
        return ["model"]
    if job.get("kind") == "verl":
        return ["actor"] + [r for r in ("ref", "critic") if roles.get(r)]
    return []


def role_settings(job: dict, role: str) -> dict[str, dict]:
    """A role's settings as its config sees them ({name: {"value", "raw"}})."""
    roles = _dict(job.get("roles"))
    own = _dict(roles.get(role))
    if job.get("kind") == "verl" and role == "ref":
        return {**_dict(roles.get("actor")), **own}
    return dict(own)


def common_setting(job: dict, name: str) -> dict | None:
    value = _dict(job.get("common")).get(name)
    return value if isinstance(value, dict) else None

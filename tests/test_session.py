"""A real session on this machine (CPU only): the probes a run declares, which its time budget counts, are the ones
it starts, and the run keeps to that budget."""

from __future__ import annotations

import sys

import pytest

from dsv4_doctor.model.core import Profile
from dsv4_doctor.engine.session import Session, select

VERL_CP2 = ["python3", "-m", "verl.trainer.main_ppo", "actor_rollout_ref.actor.megatron.context_parallel_size=2",
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1"]


def _profile(job: bool) -> Profile:
    if not job:
        return Profile(cp=2)
    from dsv4_doctor.job.profile import job_profile

    return job_profile(Profile(), VERL_CP2, None, None)


@pytest.mark.parametrize("job", [False, True], ids=["options", "job"])
def test_the_probes_a_run_declares_are_the_ones_it_runs_inside_its_budget(job, bare_python):
    """Every built-in check, as `check` selects them. Without a job the target has torch (the checks that read it go
    on to their later probes); with a job it has nothing (the checks stop early, their probes still run)."""
    session = Session(bare_python if job else sys.executable, None)
    try:
        session.install_signals()
        session.start()
        session.load()
        profile = _profile(job)
        selected = select(session.all_checks(), [], [], job=profile.job is not None)
        session.check_target()
        profile = session.resolve(profile)
        builtin = [c for c in selected if session.registry is not None and session.registry.get(c.id) is c]
        declared = session.declared_probes(builtin, profile)
        outcome = session.run(profile, selected)
    finally:
        session.close()
    assert job == any(c.id.startswith("job.") for c in outcome.reports)
    started = set(session.pool.submitted) - {session.handshake.key}  # the handshake comes before any budget
    assert started == set(declared), (sorted(started - set(declared)), sorted(set(declared) - started))
    assert len(declared) > 3 and "torch" in declared
    assert outcome.duration_s <= outcome.budget_s
    assert not [r.id for r in outcome.reports if "time budget" in r.summary]

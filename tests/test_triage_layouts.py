"""Assembled multi-rank layouts: each gives the right first failure and rank, through the real CLI."""

from __future__ import annotations

from pathlib import Path

from triage_helpers import triage, triage_json

LAYOUTS = Path(__file__).resolve().parent / "triage" / "layouts"


def test_srun_label_interleaved_gives_the_rank_that_failed_first_not_the_watchdog_every_other_rank_prints():
    result = triage_json(str(LAYOUTS / "srun-label.log"))
    first = result["first_failure"]
    assert first["rank"] == 2 and "illegal memory access" in first["text"]
    assert result["verdict"] == "known-symptom"
    assert result["symptoms"][0]["class"] == "illegal-memory-access"
    assert {c["rank"] for c in result["consequences"]} >= {0, 1, 3}  # the watchdog aborts, set apart
    assert any("CUDA_LAUNCH_BLOCKING=1" in advice for advice in result["collect_next"])
    assert any("compute-sanitizer" in advice for advice in result["collect_next"])


def test_slurm_per_task_files_order_by_time_not_by_file(tmp_path):
    result = triage_json(str(LAYOUTS / "slurm-per-task"))
    first = result["first_failure"]
    # task 0's file comes first, but task 2 failed four seconds earlier
    assert first["rank"] == 2 and first["file"].endswith("job-4242-2.out")
    assert result["verdict"] == "known-cause"
    assert result["causes"][0]["check"] == "mbridge.dsv4"  # the longest module path, not mcore.dsv4
    assert all(c["check"] != "mcore.dsv4" for c in result["causes"])


def test_ray_session_finds_the_timeout_in_the_dead_workers_own_stream():
    """Assembled from Ray's documented session layout (logs/worker-<id>-<job>-<pid>.err) and driver prefixes."""
    result = triage_json(str(LAYOUTS / "ray-session"))
    first = result["first_failure"]
    assert "worker-" in first["file"] and "Watchdog caught collective operation timeout" in first["text"]
    assert result["verdict"] == "known-symptom" and result["symptoms"][0]["class"] == "nccl-timeout"
    said = " ".join(c["text"] for c in result["consequences"])
    assert "ActorDiedError" in said
    assert any("TORCH_NCCL_TRACE_BUFFER_SIZE" in a for a in result["collect_next"])


def test_the_driver_prefix_gives_the_host_and_a_real_error_outranks_the_death_report(tmp_path):
    driver = tmp_path / "driver.log"
    driver.write_text((LAYOUTS / "ray-session" / "driver.log").read_text()
                      + "\x1b[36m(WorkerDict pid=51234, ip=10.0.0.7)\x1b[0m RuntimeError: CUDA error: an illegal "
                      "memory access was encountered\n")
    result = triage_json(str(driver))
    assert result["first_failure"]["host"] == "10.0.0.7" and result["first_failure"]["line"] == 7
    assert result["symptoms"][0]["class"] == "illegal-memory-access"
    assert {s["class"] for s in result["symptoms"]} == {"illegal-memory-access", "worker-died"}


def test_torchrun_prefixes_without_timestamps_go_by_stream_order():
    result = triage_json(str(LAYOUTS / "torchrun-tee.log"))
    first = result["first_failure"]
    assert first["rank"] == 1 and "No module named 'flash_mla'" in first["text"]
    assert result["causes"][0]["check"] == "kernels.flash-mla"
    assert any("ChildFailedError" in c["text"] for c in result["consequences"])
    assert all(c["rank"] != 1 or "flash_mla" not in c["text"] for c in result["consequences"])


def test_an_undecodable_file_is_read_not_refused(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_bytes(b"\xff\xfe\x00garbage \xc3\x28 latin-1 caf\xe9\n" * 50
                    + b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB \xff\n")
    result = triage_json(str(log))
    assert result["verdict"] == "known-symptom" and result["symptoms"][0]["class"] == "oom"
    assert result["first_failure"]["rank"] == 0 and result["first_failure"]["line"] == 51
    assert "\\xff" in result["first_failure"]["text"]


def test_no_failure_is_not_recognised_and_still_exit_0(tmp_path):
    (tmp_path / "a.log").write_text("step 1 loss 2.3\nstep 2 loss 2.1\n")
    result = triage_json(str(tmp_path))
    assert result["verdict"] == "not-recognised" and result["first_failure"] is None


def test_a_generic_error_is_not_recognised_and_never_given_a_cause(tmp_path):
    (tmp_path / "a.log").write_text("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                                    "KeyError: 'cp_partition_mode_xyz'\n")
    result = triage_json(str(tmp_path))
    assert result["verdict"] == "not-recognised" and result["causes"] == [] and result["first_failure"]["line"] == 3


def test_text_output_says_the_verdict_first_then_the_failure_with_context():
    done = triage(str(LAYOUTS / "torchrun-tee.log"))
    assert done.returncode == 0
    text = done.stdout.decode()
    lines = text.splitlines()
    assert lines[0] == "dsv4-doctor triage: known cause: kernels.flash-mla"
    assert text.index("First failure: rank 1") < text.index("Cause (") < text.index("Set aside as consequences")
    assert "  > ModuleNotFoundError: No module named 'flash_mla'" in text
    assert "fix:" in text

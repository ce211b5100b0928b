"""Hardening: a kernel cache no one else can swap, unreadable is not "read", a forged acknowledgement decides
nothing, and preflight leaves the job's environment alone.

The kernel cache was checked once, by path (the folder and its parent): whoever owned the folder above
($XDG_CACHE_HOME) could rename them after the check, and root's probe was then handed a 0777 folder owned by another
user, holding a planted module. It is now opened from "/" with openat and O_NOFOLLOW, every descriptor on the way
checked (kernelcache.open_verified). These tests swap the chain after the check as another user, from a process
that really runs as that user (a forked child that drops to its uid), with the doctor's side as root (CI) and as a
user that is not root."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_doctor

from dsv4_doctor.kernels import cache as kernelcache

ATTACKER, USER = 54321, 43210
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="dropping to other uids needs root (CI runs the tests as root)")


def as_uid(uid: int, fn, *args) -> dict:
    """fn(*args) in a forked child running as `uid` (its group too); its JSON-able result, or {"error": ...}."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no return from here
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            try:
                out = {"result": fn(*args)}
            except Exception as exc:
                out = {"error": f"{type(exc).__name__}: {exc}"}
            os.write(write_end, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    return json.loads(data or b'{"error": "no answer"}')


def swap(xdg: str) -> str:
    """What the owner of $XDG_CACHE_HOME can do after the doctor's check: move the checked folders away and put a
    0777 folder with a planted module where they were."""
    os.rename(os.path.join(xdg, "dsv4-doctor"), os.path.join(xdg, "taken"))
    planted = os.path.join(xdg, "dsv4-doctor", "cute-dsl")
    os.makedirs(planted)
    os.chmod(planted, 0o777)
    Path(planted, "cute_dsl_planted.mlir").write_text("planted")
    return "swapped"


def _shared_dir(tmp_path: Path, name: str, owner: int, mode: int) -> Path:
    """A folder in a root-owned, sticky-free chain that every uid can walk (tmp_path's parents may be 0700)."""
    base = Path("/tmp") / f"dsv4-cache-test-{os.getpid()}-{tmp_path.name}"
    base.mkdir(mode=0o755, exist_ok=True)
    base.chmod(0o755)
    folder = base / name
    folder.mkdir()
    os.chown(folder, owner, owner)
    folder.chmod(mode)
    return folder


@pytest.fixture
def cleanup(tmp_path):
    yield
    import shutil

    shutil.rmtree(Path("/tmp") / f"dsv4-cache-test-{os.getpid()}-{tmp_path.name}", ignore_errors=True)


def _after_swap(cache_dir: str | None) -> dict:
    """What the probes would be handed after the swap."""
    if cache_dir is None:
        return {"directory": None}
    st = os.stat(cache_dir)
    return {"directory": cache_dir, "uid": st.st_uid, "mode": stat.S_IMODE(st.st_mode),
            "planted": os.path.exists(os.path.join(cache_dir, "cute_dsl_planted.mlir"))}


@as_root
def test_root_never_uses_a_cache_that_another_user_can_swap_after_the_check(tmp_path, cleanup):
    xdg = _shared_dir(tmp_path, "xdg", ATTACKER, 0o755)  # the attacker's own cache home, which root was told to use
    cache = kernelcache.prepare({"XDG_CACHE_HOME": str(xdg)})
    swapped = as_uid(ATTACKER, swap, str(xdg))
    seen = _after_swap(cache.directory)
    # Before: the check passed, the swap worked, and root's probes got the attacker's 0777 folder with its module.
    assert not seen.get("planted") and seen.get("uid") in (None, 0), (cache, swapped, seen)
    assert cache.source == "refused" and f"owned by uid {ATTACKER}" in cache.note and "root" in cache.note


@as_root
def test_a_chain_only_root_can_write_cannot_be_swapped_by_anyone_else(tmp_path, cleanup):
    xdg = _shared_dir(tmp_path, "xdg", 0, 0o755)
    cache = kernelcache.prepare({"XDG_CACHE_HOME": str(xdg)})
    assert cache.source == "doctor", cache
    checked = os.stat(cache.directory).st_ino
    swapped = as_uid(ATTACKER, swap, str(xdg))
    assert "PermissionError" in swapped.get("error", ""), swapped
    assert os.stat(cache.directory).st_ino == checked and not _after_swap(cache.directory)["planted"]


def _user_side(xdg: str, sticky_parent: str) -> dict:
    """The doctor's decisions as a user who is not root: its own cache home, one owned by someone else, one that is
    writable by others, one chosen inside a sticky shared folder."""
    own = kernelcache.prepare({"XDG_CACHE_HOME": xdg})
    return {"uid": os.geteuid(), "own": [own.source, own.directory, own.note],
            "others": kernelcache.prepare({"XDG_CACHE_HOME": xdg + "-attacker"}).note,
            "open": kernelcache.prepare({"XDG_CACHE_HOME": xdg + "-open"}).note,
            "sticky": kernelcache.prepare({"DSV4_DOCTOR_KERNEL_CACHE": os.path.join(sticky_parent, "c")}).source}


@as_root
def test_as_a_user_who_is_not_root_the_cache_is_its_own_and_the_swap_fails(tmp_path, cleanup):
    xdg = _shared_dir(tmp_path, "xdg", USER, 0o700)
    _shared_dir(tmp_path, "xdg-attacker", ATTACKER, 0o755)
    _shared_dir(tmp_path, "xdg-open", USER, 0o777)
    sticky = _shared_dir(tmp_path, "shared", 0, 0o1777)
    side = as_uid(USER, _user_side, str(xdg), str(sticky))
    assert "result" in side, side
    got = side["result"]
    assert got["uid"] == USER and got["own"][0] == "doctor", got
    assert f"owned by uid {ATTACKER}, not this user or root ({USER})" in got["others"]
    assert "writable by group or others (mode 0777)" in got["open"] and got["sticky"] == "doctor"
    cache_dir = got["own"][1]
    checked = os.stat(cache_dir).st_ino
    swapped = as_uid(ATTACKER, swap, str(xdg))  # another user who is not root tries the swap
    assert "PermissionError" in swapped.get("error", ""), swapped
    assert os.stat(cache_dir).st_ino == checked and os.stat(cache_dir).st_uid == USER


def test_a_verified_directory_loads_through_its_descriptor_whatever_is_renamed_later(tmp_path):
    """The API the AOT cache uses: the opened directory, and files read through it (O_NOFOLLOW, checked on the
    opened file), not by a path that a rename can point elsewhere."""
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    (root / "kernel.bin").write_bytes(b"checked")
    verified = kernelcache.open_verified(root)
    try:
        root.rename(tmp_path / "moved")
        root.mkdir(mode=0o700)
        (root / "kernel.bin").write_bytes(b"planted")
        assert verified.child("kernel.bin") == b"checked"
        assert Path(verified.fd_path, "kernel.bin").read_bytes() == b"checked"
        (tmp_path / "moved" / "link.bin").symlink_to(tmp_path / "moved" / "kernel.bin")
        with pytest.raises(kernelcache.Refused, match="cannot open link.bin"):
            verified.child("link.bin")  # never through a symbolic link
        (tmp_path / "moved" / "open.bin").write_bytes(b"x")
        (tmp_path / "moved" / "open.bin").chmod(0o666)
        with pytest.raises(kernelcache.Refused, match="writable by group or others"):
            verified.child("open.bin")
        with pytest.raises(kernelcache.Refused, match="is not a file name"):
            verified.child("../kernel.bin")
    finally:
        verified.close()


def test_a_symlink_above_the_cache_is_followed_only_from_a_checked_folder_and_checked_too(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    cache = kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "link")})
    assert cache.source == "doctor" and (real / "dsv4-doctor" / "cute-dsl").is_dir(), cache
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert "symlink" in kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "loop")}).note


# --- unreadable is not "read" -----------------------------------------------------------------------------------

BRIDGE = "megatron/bridge/models/deepseek/deepseek_v4_bridge.py"


def _bridge(root: Path, text: str) -> Path:
    path = root / BRIDGE
    path.parent.mkdir(parents=True)
    for folder in ("megatron", "megatron/bridge", "megatron/bridge/models", "megatron/bridge/models/deepseek"):
        (root / folder / "__init__.py").write_text("")
    path.write_text(text)
    return root


def _rule(root: Path) -> tuple[dict, dict]:
    import probe_modules

    from dsv4_doctor.job import bridge_rule

    sys.path.insert(0, str(root))
    try:
        facts = probe_modules.load("dsv4probe_static_sources").source_facts(bridge_rule.BRIDGE_MODULE, [], (),
                                                                            [bridge_rule.FIELD])
    finally:
        sys.path.remove(str(root))
    return facts, bridge_rule.read_rule(json.loads(json.dumps(facts)))


RULE = "def provider_bridge(provider):\n    provider.apply_dsa_kernel_fusion = False\n"


@pytest.mark.parametrize("tail, why", [
    ("def broken(:\n", "SyntaxError"),
    ("x = " + "-" * 200_000 + "1\n", "Error"),  # nesting too deep to compile: RecursionError or a SyntaxError
])
def test_a_bridge_file_that_does_not_parse_makes_the_rule_not_known_with_its_reason(tmp_path, tail, why):
    facts, rule = _rule(_bridge(tmp_path, RULE + tail))
    assert facts["error"] and why in facts["error"]
    assert rule["readable"] is False and why in rule["why"] and "could not be read whole" in rule["why"]


def test_a_huge_bridge_file_is_capped_says_so_and_is_not_judged(tmp_path):
    """Its name list was not capped, so the probe answer's limit cut the fields after it; now every list is capped,
    the cap is said, and a rule read from a capped summary is not known."""
    names = "".join(f"name_{i} = {i}\n" for i in range(20_000))
    facts, rule = _rule(_bridge(tmp_path, RULE + names))
    assert facts["capped"] == {"names": 20_000} and len(facts["names"]) == 4000 and facts["truncated"] is True
    assert "summary capped (names: 20000" in facts["error"]
    assert len(json.dumps(facts)) < 1 << 20
    assert rule["readable"] is False and "summary capped" in rule["why"]
    _, whole = _rule(_bridge(tmp_path / "small", RULE))
    assert whole["readable"] is True and whole["terms"] == [{"kind": "const", "value": False}]


def test_an_empty_error_is_still_not_a_full_read():
    from dsv4_doctor.job import bridge_rule

    rule = bridge_rule.read_rule({"found": True, "error": "", "assignments": [
        {"attribute": bridge_rule.FIELD, "value": "True", "lineno": 3}], "functions": {}})
    assert rule["readable"] is False and "no reason given" in rule["why"]


# --- a forged acknowledgement -------------------------------------------------------------------------------------

FORGED_ACK = r"""
import json, sys, threading, time
from datetime import timedelta
import torch.distributed as dist
sys.path.insert(0, sys.argv[1])
import dsv4probe_fleet_exchange as ex
key, scope = b"k" * 32, "dsv4doctor/job/nonce"
store = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=30), wait_for_workers=False)
ch = ex.Channel(store, scope, key)
store.add(scope + "/acks", 5)  # a client without the secret: the unsigned counter says everyone acknowledged
ex.Channel(store, scope, b"x" * 32).set("ack/2", b"1")  # and an acknowledgement signed with another key
def rank1():
    time.sleep(1.0)
    client = dist.TCPStore("127.0.0.1", store.port, 1, False, timedelta(seconds=30))
    ex.Channel(client, scope, key).set("ack/1", b"1")  # rank 1's own, signed, a second later
threading.Thread(target=rank1).start()
start = time.monotonic()
acked = ex.wait_for_acks(ch, [1, 2], start + 3.0, start + 0.5, lambda: None)
print(json.dumps({"acked": sorted(acked), "seconds": time.monotonic() - start,
                  "plan_seconds": [ex._seconds(v) for v in ("inf", "nan", "x", None, "1e400", -3, 12.5)]}))
"""


def test_a_forged_acknowledgement_count_decides_nothing():
    """Before: the unsigned counter ended rank 0's wait at once, so rank 1, which acknowledged a second later and
    exited 0, was reported as not acknowledging; a rank whose acknowledgement is not signed with the job's secret
    is not counted either."""
    pytest.importorskip("torch")
    from dsv4_doctor.engine.probes import PROBE_DIR

    done = subprocess.run([sys.executable, "-c", FORGED_ACK, str(PROBE_DIR)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.splitlines()[-1])
    assert answer["acked"] == [1] and 0.9 < answer["seconds"] < 3.5, answer
    # A forged plan's seconds (no secret): never a wait without end.
    assert answer["plan_seconds"] == [86400.0, 0.0, 0.0, 0.0, 86400.0, 0.0, 12.5]


# --- preflight leaves the job's environment alone ----------------------------------------------------------------

def test_preflight_no_kernel_cache_applies_to_the_doctor_s_probes_only(tmp_path):
    """`--no-kernel-cache` wrote DSV4_DOCTOR_KERNEL_CACHE=off into the environment the job was started with."""
    out = tmp_path / "env.json"
    job = [sys.executable, "-c", f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"]
    run = run_doctor("preflight", "--no-smoke", "--no-kernel-cache", "--only", "python.version", "--", *job,
                     env={"XDG_CACHE_HOME": str(tmp_path / "xdg")}, timeout=90)
    assert run.returncode == 0, run.stderr[-800:]
    seen = json.loads(out.read_text())
    assert "DSV4_DOCTOR_KERNEL_CACHE" not in seen and "CUTE_DSL_CACHE_DIR" not in seen
    assert not (tmp_path / "xdg").exists()  # and the doctor's own probes got no cache either


def test_the_static_probes_installed_lists_are_capped_and_the_cap_said(tmp_path):
    """Every list in a probe answer is capped, with the cap reported: sys.path, Requires-Dist lines, copies of a
    distribution (a hostile environment can make each of them as long as it likes)."""
    import json
    import subprocess
    import sys

    from dsv4_doctor.engine.probes import PROBE_DIR

    site = tmp_path / "site"
    for i in range(40):  # 40 copies of one distribution, each with 2,500 requirements
        d = site / f"p{i}" / "hostile-1.0.dist-info"
        d.mkdir(parents=True)
        d.joinpath("METADATA").write_text("Metadata-Version: 2.1\nName: hostile\nVersion: 1.0\n"
                                          + "".join(f"Requires-Dist: r{j}\n" for j in range(2500)))
    paths = [str(site / f"p{i}") for i in range(40)] + [str(tmp_path / f"empty{i}") for i in range(600)]
    code = (f"import sys; sys.path[:0] = {paths!r}; sys.argv = ['x']; sys.path.insert(0, {str(PROBE_DIR)!r});"
            "import dsv4probe_static_installed as s, json;"
            "print(json.dumps({'python': s.python_facts(), 'dist': s.distribution_facts('hostile')}))")
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                    timeout=120).stdout)
    assert len(out["python"]["path"]) == 512 and out["python"]["path_entries"] > 512
    dist = out["dist"]
    assert len(dist["copies"]) == 32 and dist["copies_capped"] == 32
    assert len(dist["copies"][0]["requires"]) == 2000 and dist["copies"][0]["requires_capped"] == 2500


# ------------------------------------------------------------------ the swap between the doctor's check and the load

STAND_IN = r'''
import json, os, subprocess, sys, time
from pathlib import Path

sys.path.insert(0, os.environ["DSV4_DOCTOR_PROBE_LIB"])
from dsv4probe_common import cache_fds


def use(tag):
    """What the CuTe DSL does with its cache folder: read a module by name; store one by resolving the folder, then
    a temporary folder and os.replace (nvidia-cutlass-dsl 4.5.2 cache_helpers.save_ir)."""
    folder = os.environ["CUTE_DSL_CACHE_DIR"]
    try:
        loaded = Path(folder, "cute_dsl_k.mlir").read_text()
    except OSError as exc:
        loaded = "error: %s" % exc
    save = Path(folder).resolve()
    tmp = save / ("tmp.%s" % tag)
    tmp.mkdir()
    (tmp / "m").write_text(tag)
    os.replace(tmp / "m", save / ("cute_dsl_%s.mlir" % tag))
    tmp.rmdir()
    return {"loaded": loaded, "saved_in": str(save), "folder": folder}


if sys.argv[1] == "--grandchild":
    print(json.dumps(use("grandchild")))
    sys.exit(0)
out, request = sys.argv[1], json.loads(Path(sys.argv[2]).read_text())  # the doctor's request file
Path(request["ready"]).write_text("checked by the doctor, not loaded yet")
deadline = time.monotonic() + 60
while not os.path.exists(request["go"]) and time.monotonic() < deadline:
    time.sleep(0.02)
answer = {"probe": use("probe"), "fds": list(cache_fds())}
# As the smoke starts its ranks: close_fds (Popen's default), the cache's descriptor handed on.
done = subprocess.run([sys.executable, __file__, "--grandchild"], pass_fds=cache_fds(), capture_output=True,
                      text=True, timeout=60)
answer["grandchild"] = json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr[-800:]}
Path(out).write_text(json.dumps(answer))
'''


@pytest.fixture
def swapped_run(tmp_path, monkeypatch):
    """A probe stand-in run by the doctor (run_probe), whose cache folder the doctor checked before it started; once
    it runs, and before it loads anything, the checked folders are renamed away and a 0777 folder holding a planted
    module is put at the old path (what the owner of the folder above could do). Returns (result, checked, planted)."""
    import threading

    from dsv4_doctor.engine.probes import Probe, run_probe
    from dsv4_doctor.hostio.procs import Processes

    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    for name in ("CUTE_DSL_CACHE_DIR", "CUTE_DSL_DUMP_DIR", kernelcache.ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    cache = xdg / "dsv4-doctor" / "cute-dsl"
    cache.mkdir(parents=True, mode=0o700)
    cache.parent.chmod(0o700)
    (cache / "cute_dsl_k.mlir").write_text("checked")
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    ready, go = tmp_path / "ready", tmp_path / "go"
    probe = Probe.python("cache-stand-in", str(script), {"ready": str(ready), "go": str(go)}, timeout_s=120)
    kernelcache.reset()
    procs = Processes()
    got: dict = {}
    runner = threading.Thread(target=lambda: got.update(result=run_probe(probe, sys.executable, 120, procs)))
    runner.start()
    try:
        for _ in range(3000):
            if ready.exists() or not runner.is_alive():
                break
            import time

            time.sleep(0.02)
        assert ready.exists(), got
        os.rename(xdg / "dsv4-doctor", xdg / "taken")
        planted = xdg / "dsv4-doctor" / "cute-dsl"
        planted.mkdir(parents=True)
        planted.chmod(0o777)
        (planted / "cute_dsl_k.mlir").write_text("planted")
        go.write_text("go")
        runner.join(150)
    finally:
        go.touch()
        runner.join(10)
        procs.close()
        kernelcache.reset()
    return got["result"], xdg / "taken" / "cute-dsl", planted


def test_a_probe_loads_and_stores_through_the_checked_folder_when_it_is_swapped_after_the_check(swapped_run):
    result, checked, planted = swapped_run
    assert result.ok, (result.error, result.stderr_tail)
    seen = result.data["probe"]
    # Before: the probe got the path, looked it up after the swap, and read the planted module.
    assert seen["loaded"] == "checked", seen
    assert seen["folder"] == kernelcache.PROBE_PATH and seen["saved_in"] == str(checked), seen
    assert (checked / "cute_dsl_probe.mlir").read_text() == "probe"
    assert sorted(p.name for p in planted.iterdir()) == ["cute_dsl_k.mlir"]  # nothing read or written there
    assert result.data["fds"] == [kernelcache.PROBE_FD]


def test_the_checked_folder_reaches_a_process_the_probe_starts(swapped_run):
    result, checked, planted = swapped_run
    assert result.ok, (result.error, result.stderr_tail)
    grandchild = result.data["grandchild"]
    assert grandchild.get("loaded") == "checked" and grandchild.get("saved_in") == str(checked), grandchild
    assert (checked / "cute_dsl_grandchild.mlir").read_text() == "grandchild"
    assert not (planted / "cute_dsl_grandchild.mlir").exists()


def test_a_descriptor_number_in_use_is_never_taken_and_the_evidence_says_the_path_is_used(tmp_path):
    kernelcache.reset()
    busy = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(busy, kernelcache.PROBE_FD, inheritable=False)  # something else of this process holds 211
        cache = kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "xdg")})
        assert os.path.samestat(os.fstat(kernelcache.PROBE_FD), os.fstat(busy))  # untouched
        path = str(tmp_path / "xdg" / "dsv4-doctor" / "cute-dsl")
        assert cache.source == "doctor" and cache.fd is None and cache.pass_fds == ()
        assert cache.env["CUTE_DSL_CACHE_DIR"] == path
        assert f"descriptor {kernelcache.PROBE_FD} is in use" in cache.note
        assert cache.evidence()["probes_open_it_as"] == path
    finally:
        os.close(kernelcache.PROBE_FD)
        os.close(busy)
        kernelcache.reset()


def test_the_cache_path_is_the_same_string_on_every_run(tmp_path):
    """The DSL hashes its cache and dump folder into each module's key: the probes' must not change between runs."""
    kernelcache.reset()
    try:
        first = kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "a")}).env
        second = kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "a")}).env
        assert first == second == {"CUTE_DSL_CACHE_DIR": kernelcache.PROBE_PATH,
                                   "CUTE_DSL_DUMP_DIR": kernelcache.PROBE_PATH,
                                   kernelcache.AOT_ENV: kernelcache.PROBE_PATH}
        assert os.path.realpath(kernelcache.PROBE_PATH) == str(tmp_path / "a" / "dsv4-doctor" / "cute-dsl")
    finally:
        kernelcache.reset()


SH_STAND_IN = r'''
while [ ! -e "$GO" ]; do sleep 0.02; done
cat "$CUTE_DSL_CACHE_DIR/cute_dsl_k.mlir" > "$OUT" 2>&1
saved=$(realpath "$CUTE_DSL_CACHE_DIR")
echo probe > "$saved/cute_dsl_probe.mlir"
echo "$saved" >> "$OUT"
'''


def _probe_through_a_swap_as_this_user(xdg: str, scratch: str) -> dict:
    """As a user who is not root (no interpreter of the tests' is theirs to run: a shell stands in for the probe):
    the doctor's check, the probe started with the cache's descriptor (close_fds, pass_fds), the swap by the owner
    of the folder above, then the probe's load and store."""
    import time

    kernelcache.reset()
    cache = kernelcache.prepare({"XDG_CACHE_HOME": xdg})
    out, go = os.path.join(scratch, "out"), os.path.join(scratch, "go")
    env = dict(cache.env, GO=go, OUT=out, PATH=os.environ.get("PATH", "/usr/bin:/bin"))
    proc = subprocess.Popen(["/bin/sh", "-c", SH_STAND_IN], env=env, pass_fds=cache.pass_fds, close_fds=True)
    time.sleep(0.2)  # started: it waits for GO before it looks at the cache
    swap(xdg)
    Path(go).touch()
    proc.wait(30)
    return {"uid": os.geteuid(), "env": cache.env, "out": Path(out).read_text().splitlines(),
            "planted": sorted(os.listdir(os.path.join(xdg, "dsv4-doctor", "cute-dsl")))}


@as_root
def test_as_a_user_who_is_not_root_the_probe_loads_through_the_checked_folder_after_a_swap(tmp_path, cleanup):
    xdg = _shared_dir(tmp_path, "xdg", USER, 0o700)
    scratch = _shared_dir(tmp_path, "scratch", USER, 0o700)
    checked = xdg / "dsv4-doctor" / "cute-dsl"
    def seed() -> None:  # the user's cache, with one module in it
        checked.mkdir(parents=True, mode=0o700)
        checked.parent.chmod(0o700)
        (checked / "cute_dsl_k.mlir").write_text("checked\n")

    assert "error" not in as_uid(USER, seed)
    side = as_uid(USER, _probe_through_a_swap_as_this_user, str(xdg), str(scratch))
    assert "result" in side, side
    got = side["result"]
    assert got["uid"] == USER and got["env"]["CUTE_DSL_CACHE_DIR"] == kernelcache.PROBE_PATH, got
    # Before: the probe looked the path up after the swap and read the planted module.
    assert got["out"] == ["checked", str(xdg / "taken" / "cute-dsl")], got
    assert got["planted"] == ["cute_dsl_planted.mlir"]
    assert (xdg / "taken" / "cute-dsl" / "cute_dsl_probe.mlir").read_text() == "probe\n"


def test_a_decision_whose_descriptor_was_let_go_still_starts_every_probe(tmp_path, monkeypatch):
    """release() (or anything else closing descriptor 211) after the run's decision: the next probe must not be
    started with a descriptor this process no longer holds (Popen's pass_fds: EBADF, every probe "could not start");
    the decision is made again, and a decision that cannot hold it gives the path."""
    from dsv4_doctor.engine.probes import Probe, run_probe
    from dsv4_doctor.hostio.procs import Processes

    for name in ("CUTE_DSL_CACHE_DIR", "CUTE_DSL_DUMP_DIR", kernelcache.ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    script = tmp_path / "echo_cache.py"
    script.write_text("import json, os, sys\nfolder = os.environ.get('CUTE_DSL_CACHE_DIR') or '/nonexistent'\n"
                      "open(sys.argv[1], 'w').write(json.dumps({'cache': folder, 'seen': os.path.isdir(folder)}))\n")
    probe = Probe.python("cache-echo", str(script), {}, timeout_s=60)
    kernelcache.reset()
    procs = Processes()
    try:
        first = kernelcache.for_run()
        assert first.pass_fds == (kernelcache.PROBE_FD,)
        kernelcache.release()  # the descriptor is let go; the decision object lives on
        assert not first.holds() and first.pass_fds == ()
        assert "/proc/self" not in first.env_for(True)["CUTE_DSL_CACHE_DIR"]
        result = run_probe(probe, sys.executable, 60, procs)
        assert result.ok, (result.error, result.stderr_tail)
        assert result.data["seen"] is True, result.data  # a directory the probe could open, by fd or by path
        assert kernelcache.for_run().holds()  # made again: the descriptor is held once more
    finally:
        procs.close()
        kernelcache.reset()

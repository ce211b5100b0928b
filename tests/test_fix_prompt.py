"""`fix --apply`'s y/N prompt (typer.confirm) on a real pseudo-terminal that is the doctor's controlling terminal:
yes runs the plan's pip step and re-checks; no, an empty answer and the end of input apply nothing and keep the
first run's exit code; Ctrl-C applies nothing and exits 130. The plan stays alone on stdout."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
import zipfile

import pytest

from conftest import doctor_command

PROMPT = b"Run the 1 pip command(s) of this plan now? [y/N]: "


@pytest.fixture
def needs_a_package(site, tmp_path):
    """A plugin check that fails until the package dsv4_marker_pkg imports; its fix is a pip install of a local
    wheel into the plugin's own site directory (no network)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "dsv4_marker_pkg-1.0-py3-none-any.whl", "w") as z:
        z.writestr("dsv4_marker_pkg.py", "X = 1\n")
        z.writestr("dsv4_marker_pkg-1.0.dist-info/METADATA",
                   "Metadata-Version: 2.1\nName: dsv4-marker-pkg\nVersion: 1.0\n")
        z.writestr("dsv4_marker_pkg-1.0.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr("dsv4_marker_pkg-1.0.dist-info/RECORD", "")
    site.file("marker_plugin.py", f"""
        import importlib.util
        from dsv4_doctor.model.core import Check, Fix, Source, failed, passed
        FIX = Fix("Install the marker package", [["pip", "install", "--no-index", "--find-links", {str(wheels)!r},
                                                  "--target", {str(site.root)!r}, "dsv4-marker-pkg"]])
        CHECKS = [Check(id="demo.pkg", title="The marker package", explanation="A demo.", applies_when="always",
                        detects="a package", sources=(Source("demo", "https://x.invalid"),), fixes=(FIX,),
                        run=lambda ctx: passed("installed") if importlib.util.find_spec("dsv4_marker_pkg")
                        else failed("missing", fixes=[FIX]))]
    """)
    site.dist("marker-plugin", "1", entry_points="[dsv4_doctor.checks]\nm = marker_plugin\n")
    return site


def _fix_on_a_terminal(site, keys: list[bytes]) -> tuple[int, bytes, str]:
    """`fix --apply` with stdin and stderr on a pseudo-terminal (its controlling terminal, so ^C is a real SIGINT
    from the terminal) and stdout on a pipe; `keys` are typed one by one, each once the prompt shows (again). Its
    exit code, what the terminal showed and the plan."""
    import pty

    leader, follower = pty.openpty()
    name = os.ttyname(follower)

    def take_the_terminal() -> None:  # after setsid: opening the terminal makes it the session's
        os.close(os.open(name, os.O_RDWR))

    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "CI", "GITHUB_ACTIONS")}
    env.update(PYTHONPATH=str(site.root), TERM="xterm", PYTHONIOENCODING="utf-8")
    proc = subprocess.Popen(doctor_command() + ["fix", "--apply", "--only", "demo.pkg", "--python", sys.executable],
                            stdin=follower, stderr=follower, stdout=subprocess.PIPE, env=env, close_fds=True,
                            start_new_session=True, preexec_fn=take_the_terminal)
    os.close(follower)
    shown, pending = b"", list(keys)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the doctor exited and closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        if pending and shown.count(PROMPT) > len(keys) - len(pending):
            os.write(leader, pending.pop(0))
    os.close(leader)
    plan = proc.stdout.read().decode() if proc.stdout else ""
    return proc.wait(timeout=60), shown, plan


def _lines(shown: bytes) -> str:
    return shown.decode("utf-8", "replace").replace("\r\n", "\n")


def test_yes_applies_the_plan_and_rechecks(needs_a_package):
    code, shown, plan = _fix_on_a_terminal(needs_a_package, [b"y\n"])
    text = _lines(shown)
    assert code == 0, text[-3000:]
    assert text.count(PROMPT.decode()) == 1
    assert "-I -m pip install --no-index" in text  # the echo of the pip command that ran
    assert "before: Verdict: FAIL" in text and "after:  Verdict: PASS" in text and "still failing" not in text
    assert (needs_a_package.root / "dsv4_marker_pkg.py").exists()
    assert plan.startswith("#!/bin/sh") and plan.endswith("\n") and "[y/N]" not in plan  # the plan alone


@pytest.mark.parametrize("answer", [[b"n\n"], [b"\n"], [b"maybe\n", b"no\n"]], ids=["n", "empty", "invalid-then-no"])
def test_no_or_the_default_applies_nothing(needs_a_package, answer):
    code, shown, plan = _fix_on_a_terminal(needs_a_package, answer)
    text = _lines(shown)
    assert code == 1, text[-3000:]  # the first run's exit code: the check still fails
    assert "nothing applied" in text and "-m pip" not in text
    assert text.count(PROMPT.decode()) == len(answer)
    assert ("Error: invalid input" in text) is (len(answer) > 1)  # typer asks again
    assert not (needs_a_package.root / "dsv4_marker_pkg.py").exists()
    assert plan.startswith("#!/bin/sh") and "[y/N]" not in plan and not plan.endswith(" ")


@pytest.mark.parametrize("key, exit_code", [(b"\x04", 1), (b"\x03", 130)], ids=["ctrl-d", "ctrl-c"])
def test_the_end_of_input_or_ctrl_c_applies_nothing(needs_a_package, key, exit_code):
    code, shown, _ = _fix_on_a_terminal(needs_a_package, [key])
    text = _lines(shown)
    assert code == exit_code, text[-3000:]
    assert "nothing applied" in text and "-m pip" not in text and "Traceback" not in text
    assert not (needs_a_package.root / "dsv4_marker_pkg.py").exists()


def test_the_prompt_goes_through_the_output_layer(monkeypatch, capfd):
    """Whatever the prompt writes is cleaned on its way to stderr (no escape reaches the terminal), and nothing
    of it goes to stdout."""
    import io

    from dsv4_doctor.cli import main as cli

    monkeypatch.setattr(sys, "stdin", io.StringIO("maybe\ny\n"))
    answer = cli.ask("Apply \x1b]52;c;ZXZpbA==\x07 \x1b[31mnow?")
    out, err = capfd.readouterr()
    assert answer.yes and answer.signum is None
    assert out == ""
    assert "\x1b" not in err and "\x07" not in err
    assert err.count("[y/N]: ") == 2 and "Error: invalid input" in err
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert cli.ask("Apply?") == cli.ask("Apply?")  # the end of input: no, no signal
    assert not cli.ask("Apply?").yes

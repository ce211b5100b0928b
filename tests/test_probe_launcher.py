"""A plugin's probe script goes through the one launcher (dsv4probe_launch.py), as the doctor's own do: the new form
carries no bootstrap, and a script that still carries the copied one keeps working (its copy finds the library
already loaded by path). Beside each script lies a hostile dsv4probe_common package: a script that imported the
library by name would end with its exit code instead of answering."""

from __future__ import annotations

import sys
from pathlib import Path

from dsv4_doctor.engine.probes import Probe, run_probe
from dsv4_doctor.hostio.procs import Processes

EXIT = 86
NEW_FORM = '''
import os
import sys

from dsv4probe_common import PROBE_COMMON, serve

HERE = os.path.dirname(os.path.realpath(__file__))


def answer(request):
    return {"echo": request.get("x"), "library": PROBE_COMMON, "here_on_path": HERE in map(os.path.realpath, sys.path)}


if __name__ == "__main__":
    serve(answer)
'''
OLD_FORM = '''
import os
import sys

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != HERE]
if getattr(sys.modules.get("dsv4probe_common"), "PROBE_COMMON", None) is not True:
    import importlib.util

    _spec = importlib.util.spec_from_file_location("dsv4probe_common", os.path.join(
        os.environ.get("DSV4_DOCTOR_PROBE_LIB") or HERE, "dsv4probe_common.py"))
    sys.modules["dsv4probe_common"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["dsv4probe_common"])
from dsv4probe_common import PROBE_COMMON, serve


def answer(request):
    return {"echo": request.get("x"), "library": PROBE_COMMON, "here_on_path": HERE in map(os.path.realpath, sys.path)}


if __name__ == "__main__":
    serve(answer)
'''


def _plugin(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "plugin"
    folder.mkdir()
    (folder / "dsv4probe_common").mkdir()
    (folder / "dsv4probe_common" / "__init__.py").write_text("import os\nos._exit(%d)\n" % EXIT)
    script = folder / "dsv4probe_myplugin.py"
    script.write_text(text)
    return script


def _run(script: Path):
    result = run_probe(Probe.python("plugin:echo", script, {"x": "hi"}), sys.executable, 30, Processes())
    assert result.returncode != EXIT, result.stderr_tail
    assert result.ok, (result.error, result.stderr_tail)
    return result.data


def test_a_plugin_probe_in_the_new_form_needs_no_bootstrap(tmp_path):
    assert _run(_plugin(tmp_path, NEW_FORM)) == {"echo": "hi", "library": True, "here_on_path": False}


def test_a_plugin_probe_with_the_old_copied_bootstrap_still_answers(tmp_path):
    assert _run(_plugin(tmp_path, OLD_FORM)) == {"echo": "hi", "library": True, "here_on_path": False}


def test_a_fatal_signals_extension_module_list_never_pushes_the_crash_words_out(tmp_path):
    """On SIGSEGV, faulthandler ends the stderr with "Extension modules: ..." naming every loaded extension: with a
    real stack (torch, TE, flash_mla, cudnn) kilobytes, which pushed the crash's own words ("no kernel image is
    available") out of the kept tail on CI. The tail keeps them; a tail that is still too long is cut at a line."""
    from dsv4_doctor.hostio.procs import read_crash_tail
    from dsv4_doctor.hostio.redact import TAIL_CUT

    log = tmp_path / "stderr"
    modules = ", ".join(f"torch._C._module{i}" for i in range(600))
    log.write_text("CUDA error: no kernel image is available for execution on the device (phase1.cuh:687)\n"
                   "Fatal Python error: Segmentation fault\n\nCurrent thread 0x7f (most recent call first):\n"
                   '  File "/x/dsv4probe_launch.py", line 40 in main\n\n'
                   f"Extension modules: {modules} (total: 600)\n")
    tail = read_crash_tail(str(log), 2000)
    assert "no kernel image is available" in tail and "Extension modules" not in tail
    log.write_text("\n".join(f"line {i} " + "x" * 60 for i in range(200)) + "\n")
    cut = read_crash_tail(str(log), 2000)
    assert cut.startswith(TAIL_CUT.strip()) and len(cut) <= 2000 + len(TAIL_CUT)
    assert cut.endswith("line 199 " + "x" * 60)

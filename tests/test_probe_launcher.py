"""A plugin's probe script goes through the one launcher (dsv4probe_launch.py), as the doctor's own do: the new form
carries no bootstrap, and a script that still carries the copied one keeps working (its copy finds the library
already loaded by path). Beside each script lies a hostile dsv4probe_common package: a script that imported the
library by name would end with its exit code instead of answering."""

from __future__ import annotations

import sys
from pathlib import Path

from dsv4_doctor.probes import Probe, run_probe
from dsv4_doctor.procs import Processes

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

"""The toolchain probe's answer (its entry: dsv4probe_toolchain.py). Stdlib only, Python 3.8+; loaded by path
(dsv4probe_common.load_module), and importable on its own by a test.

Every lookup mirrors the upstream code that will do it during the build:
- CUDA_HOME: torch.utils.cpp_extension._find_cuda_home (CUDA_HOME, else CUDA_PATH, else the folder above the `nvcc`
  on PATH, else /usr/local/cuda when it exists);
- nvcc: `$CUDA_HOME/bin/nvcc --version`, parsed with torch's `release (\\d+[.]\\d+)` (_check_cuda_version), here with
  a timeout and bounded output: a hanging or babbling nvcc is an answer, never a hung probe;
- the library folder: torch's library_paths (lib64, or lib where only lib exists), and whether `libcudart.so`, which
  `-lcudart` needs, is in it;
- the C++ compiler: torch's get_cxx_compiler (`$CXX`, else `c++`), looked up on PATH;
- ninja: torch's is_ninja_available runs `ninja --version` from PATH.
"""

import os
import re
import shlex
import shutil
import signal
import subprocess
import sysconfig
import tempfile

NVCC_TIMEOUT_S = 10.0
OUTPUT_BYTES = 4096  # of `nvcc --version`: its real output is ~250 bytes
SHOWN_CHARS = 300
RELEASE = re.compile(r"release (\d+)[.](\d+)")  # torch's `release (\d+[.]\d+)`, major and minor apart
VALUE_CHARS = 4096


def _env(name):
    value = os.environ.get(name)
    return value[:VALUE_CHARS] if value else value  # torch: `os.environ.get(...) or ...`: empty is unset


def cuda_home():
    """(CUDA_HOME, where it came from) as torch.utils.cpp_extension._find_cuda_home finds it on Linux."""
    for name in ("CUDA_HOME", "CUDA_PATH"):
        if _env(name):
            return _env(name), name
    nvcc = shutil.which("nvcc")
    if nvcc:
        return os.path.dirname(os.path.dirname(nvcc)), "nvcc on PATH (%s)" % nvcc
    if os.path.exists("/usr/local/cuda"):
        return "/usr/local/cuda", "the default /usr/local/cuda"
    return None, "none: CUDA_HOME and CUDA_PATH are unset, no nvcc on PATH, no /usr/local/cuda"


def _kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: a grandchild holding the output goes too
    except OSError:
        pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass


def nvcc_version(nvcc, timeout_s=NVCC_TIMEOUT_S):
    """`nvcc --version`: {"release": "13.0"} or {"release": None, "error": why}, with the head of its output. The
    output goes to a file, never a pipe a grandchild could hold; the process gets its own session and is killed with
    its group at the timeout."""
    out = {"path": nvcc, "release": None}
    with tempfile.TemporaryFile() as sink:
        try:
            proc = subprocess.Popen([nvcc, "--version"], stdin=subprocess.DEVNULL, stdout=sink,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        except (OSError, ValueError) as exc:
            out["error"] = "it cannot be run: %s" % str(exc)[:SHOWN_CHARS]
            return out
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _kill(proc)
            out["error"] = "`nvcc --version` did not finish within %g s" % timeout_s
            out["timed_out"] = True
            return out
        sink.seek(0)
        text = sink.read(OUTPUT_BYTES).decode("utf-8", "replace")
    out["head"] = text[:SHOWN_CHARS]
    if code != 0:
        out["error"] = "`nvcc --version` exited with code %d" % code
        return out
    found = RELEASE.search(text)
    if found is None:
        out["error"] = "`nvcc --version` printed no `release X.Y`"
        return out
    out["release"] = "%d.%d" % (int(found.group(1)), int(found.group(2)))
    return out


def library_dir(home):
    """torch's library_paths on Linux: lib64, unless lib64 does not exist and lib does."""
    lib64, lib = os.path.join(home, "lib64"), os.path.join(home, "lib")
    return lib if not os.path.exists(lib64) and os.path.exists(lib) else lib64


# Where ld looks for -lcudart after torch's -L$CUDA_HOME/lib64: LIBRARY_PATH, then the system's folders (a distro's
# toolkit keeps it in the multiarch folder, e.g. Debian's nvidia-cuda-toolkit with CUDA_HOME=/usr).
SYSTEM_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib/x86_64-linux-gnu",
                   "/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64", "/lib")


def _cudart(folder):
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith("libcudart."))[:20]
    except OSError:
        names = []
    linkable = os.path.exists(os.path.join(folder, "libcudart.so"))
    searched = [d for d in (_env("LIBRARY_PATH") or "").split(os.pathsep) if d.startswith("/")][:20] + \
        list(SYSTEM_LIB_DIRS)
    elsewhere = None if linkable else next(
        (os.path.join(d, "libcudart.so") for d in searched if os.path.exists(os.path.join(d, "libcudart.so"))), None)
    return {"dir": folder, "linkable": linkable, "found": names, "elsewhere": elsewhere}


def answer(request):
    timeout_s = request.get("nvcc_timeout_s") if isinstance(request, dict) else None
    timeout_s = float(timeout_s) if isinstance(timeout_s, (int, float)) and 0 < timeout_s <= 60 else NVCC_TIMEOUT_S
    home, source = cuda_home()
    out = {"path": (_env("PATH") or "")[:VALUE_CHARS], "cuda_home": home, "cuda_home_from": source,
           "cuda_home_exists": bool(home) and os.path.isdir(home), "nvcc_on_path": shutil.which("nvcc")}
    if home:
        nvcc = os.path.join(home, "bin", "nvcc")
        out["nvcc"] = nvcc_version(nvcc, timeout_s) if os.path.isfile(nvcc) else {"path": nvcc, "missing": True}
        cccl = os.path.join(home, "include", "cccl")
        out["cccl"] = {"path": cccl, "exists": os.path.isdir(cccl)}
        out["cudart"] = _cudart(library_dir(home))
    cxx = _env("CXX")
    # CXX may be a command line ("ccache g++", "g++ -O2"): its first word is the program
    try:
        program = shlex.split(cxx)[0] if cxx else "c++"
    except (ValueError, IndexError):
        program = cxx or "c++"
    out["cxx"] = {"name": cxx or "c++", "from": "CXX" if cxx else "default", "path": shutil.which(program)}
    scripts = sysconfig.get_path("scripts")
    in_scripts = os.path.join(scripts, "ninja") if scripts else None
    out["ninja"] = {"path": shutil.which("ninja"), "scripts": scripts,
                    "in_scripts": in_scripts if in_scripts and os.path.isfile(in_scripts) else None,
                    "scripts_on_path": bool(scripts) and scripts in (_env("PATH") or "").split(os.pathsep)}
    out["purelib"] = sysconfig.get_path("purelib")
    return out

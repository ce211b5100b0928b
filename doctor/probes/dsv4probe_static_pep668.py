"""PEP 668 for this interpreter: whether pip refuses to install into it, read without running pip.

A part of the static probe, loaded by path (dsv4probe_common.load_module). Stdlib only, Python 3.8+.

The rules, as PEP 668 states them and pip (23.0 and later, pip/_internal/utils/misc.py check_externally_managed)
applies them:
- the marker is the file EXTERNALLY-MANAGED in `sysconfig.get_path("stdlib")`; pip tests it with os.path.isfile;
- it does not apply inside a virtual environment: `sys.prefix != sys.base_prefix` (or a legacy virtualenv's
  `sys.real_prefix`, which pip counts too);
- a marker that is there but cannot be read or parsed still applies (pip then shows a message of its own); its
  `[externally-managed]` section's `Error` key is the distributor's message;
- pip's own override lets it install anyway: `--break-system-packages`, PIP_BREAK_SYSTEM_PACKAGES in the environment,
  or `break-system-packages` in a pip configuration file (read here as pip reads them: global, user, site, then
  PIP_CONFIG_FILE; the later wins, the environment variable over all; PIP_CONFIG_FILE=/dev/null reads none).
"""

import os
import sys

MARKER = "EXTERNALLY-MANAGED"
MARKER_LIMIT = 1 << 16  # bytes of the marker read (Debian's is 645)
CONFIG_LIMIT = 1 << 16  # bytes of a pip configuration file read
ERROR_CHARS = 2000  # of the distributor's message kept as evidence
OVERRIDE_KEY = "break-system-packages"
# pip's strtobool, for a flag given in its configuration or environment
TRUE_WORDS, FALSE_WORDS = ("y", "yes", "t", "true", "on", "1"), ("n", "no", "f", "false", "off", "0")


def _common():
    """dsv4probe_common: the probe loaded it first (it loads this part by path)."""
    return sys.modules["dsv4probe_common"]


def in_venv():
    """pip's running_under_virtualenv: a venv (sys.prefix differs from sys.base_prefix) or a legacy virtualenv."""
    return sys.prefix != getattr(sys, "base_prefix", sys.prefix) or hasattr(sys, "real_prefix")


def _parsed(raw):
    """A configparser of `raw` (bytes), as pip reads its files (no interpolation); raises on anything odd."""
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(raw.decode("utf-8"))
    return parser


def marker_facts():
    """{marker, found, in_venv, error, unread}: where the marker is, whether pip finds it, the distributor's message."""
    import sysconfig

    out = {"marker": None, "found": False, "in_venv": in_venv(), "error": None, "unread": None}
    try:
        stdlib = sysconfig.get_path("stdlib")
    except Exception as exc:  # a broken sysconfig: pip would fail the same way; said, never guessed
        out["unread"] = "sysconfig.get_path('stdlib') failed: %s" % type(exc).__name__
        return out
    if not isinstance(stdlib, str) or not stdlib:
        out["unread"] = "sysconfig names no stdlib folder"
        return out
    out["marker"] = os.path.join(stdlib, MARKER)
    out["found"] = os.path.isfile(out["marker"])
    if not out["found"]:
        return out
    common = _common()
    try:
        raw, size = common.read_bounded(out["marker"], MARKER_LIMIT + 1)
    except OSError as exc:
        out["unread"] = "not read: %s" % (exc.strerror or exc)
        return out
    if size > MARKER_LIMIT:
        out["unread"] = "not parsed: it is larger than %d bytes" % MARKER_LIMIT
        return out
    try:
        text = _parsed(raw).get("externally-managed", "Error", fallback=None)
    except Exception as exc:  # not UTF-8, not an INI file: pip falls back to its own message
        out["unread"] = "not parsed (%s)" % type(exc).__name__
        return out
    if isinstance(text, str) and text.strip():
        out["error"] = common.cut_text(text.strip(), ERROR_CHARS)
    return out


def _truth(value):
    value = value.strip().lower()
    return True if value in TRUE_WORDS else (False if value in FALSE_WORDS else None)


def config_files():
    """pip's configuration files in the order it applies them (a later one wins), or [] when PIP_CONFIG_FILE is
    /dev/null (pip then reads none)."""
    env_file = os.environ.get("PIP_CONFIG_FILE")
    if env_file == os.devnull:
        return []
    xdg_dirs = os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
    files = [os.path.join(d, "pip", "pip.conf") for d in xdg_dirs.split(os.pathsep) if d]
    files.append("/etc/pip.conf")
    home = os.path.expanduser("~")
    config_home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    files += [os.path.join(home, ".pip", "pip.conf"), os.path.join(config_home, "pip", "pip.conf")]
    files.append(os.path.join(sys.prefix, "pip.conf"))
    if env_file:
        files.append(env_file)
    return files


def override():
    """Where pip's override is set for `pip install`, in words, or None: the environment variable, else the last
    configuration file whose [global] or [install] section sets it (the later section wins within a file)."""
    value = os.environ.get("PIP_BREAK_SYSTEM_PACKAGES")
    if value is not None and _truth(value) is not None:
        return "PIP_BREAK_SYSTEM_PACKAGES=%s in the environment" % value.strip() if _truth(value) else None
    found = None
    for path in config_files():
        try:
            raw, size = _common().read_bounded(path, CONFIG_LIMIT + 1)
            parser = _parsed(raw) if size <= CONFIG_LIMIT else None
        except Exception:  # absent, unreadable or malformed: pip reads nothing from it either
            continue
        for section in ("global", "install"):
            if parser is None or not parser.has_section(section):
                continue
            for key, setting in parser.items(section):
                if key.lower().replace("_", "-").lstrip("-") == OVERRIDE_KEY and _truth(setting) is not None:
                    found = "%s = %s in %s [%s]" % (OVERRIDE_KEY, setting.strip(), path, section) \
                        if _truth(setting) else None
    return found


def externally_managed():
    """The marker's facts and pip's override; never raises (an unexpected failure is said in `unread`)."""
    try:
        out = marker_facts()
    except Exception as exc:
        return {"marker": None, "found": False, "in_venv": in_venv(), "error": None, "override": None,
                "unread": "not read: %s" % type(exc).__name__}
    try:
        out["override"] = override() if out["found"] and not out["in_venv"] else None
    except Exception:
        out["override"] = None
    return out

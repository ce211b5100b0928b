"""The composition probe's answer (its entry: dsv4probe_hydra.py): the entry module's @hydra.main read with ast, the
command's overrides checked as Hydra checks them, the config composed with Hydra's own compose, and each asked setting
with its value, type and source, bounded. Stdlib only at import, Python 3.8+; hydra and omegaconf only inside answer.
Loaded by path (dsv4probe_common.load_module); the settings probe composes through it too.
"""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import cut_text, error_info, parse_python, read_bounded, stage

import ast

MAX_TEXT = 200
ENTRY_LIMIT = 2_000_000  # of the entry module's source (verl 0.9.1's main_ppo.py: 8 KB)
MAX_MESSAGE = 1500


def decorator_config(entry_file):
    """(config_path, config_name) of the entry module's `@hydra.main(...)`, read with ast; (None, None) if none.
    The job's file, read as hostile input: ReadRefused (an OSError) when it is no regular file, does not parse or is
    nested too deeply."""
    tree = parse_python(read_bounded(entry_file, ENTRY_LIMIT)[0], entry_file)
    for node in ast.walk(tree):
        for deco in getattr(node, "decorator_list", ()):
            func = deco.func if isinstance(deco, ast.Call) else None
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name != "main":
                continue
            found = {}
            for kw in deco.keywords:
                if kw.arg in ("config_path", "config_name") and isinstance(kw.value, ast.Constant):
                    found[kw.arg] = kw.value.value
            if "config_name" in found:
                return found.get("config_path"), found.get("config_name")
    return None, None


def override_key(word):
    """The key an override word sets (`++a.b=1` -> a.b), or None for a word that is no override or a config group
    choice (`engine=megatron` picks a file; a dict value, `engine={...}`, sets keys)."""
    text = word.lstrip("+~")
    key, _, value = text.partition("=")
    if not key or word.startswith("-") or ("." not in key and not value.strip().startswith("{")):
        return None
    return key


MAX_ITEMS = 16  # of a list or dict answered: enough to quote it
MAX_DEPTH = 4
MAX_INT_BITS = 13000  # about 3900 digits: below every int_max_str_digits, so its text can be written and read


def plain(value, depth=0):
    """A composed value as JSON carries it, bounded: lists and dicts as themselves (their first items, "…" for the
    rest), text cut, an integer past 2^63 as its digits (the doctor reads JSON integers to 64 bits)."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return repr(value)  # JSON has no infinity or NaN: their text
    if value is None or isinstance(value, (bool, float)):
        return value
    if isinstance(value, int):
        if abs(value) < 2 ** 63:
            return value
        if value.bit_length() > MAX_INT_BITS:
            return "a number of more than %d digits" % int(MAX_INT_BITS * 0.30103)
        return str(value)
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if depth >= MAX_DEPTH:
        return "…"
    if isinstance(value, dict):
        items = list(value.items())
        out = dict((str(k)[:MAX_TEXT], plain(v, depth + 1)) for k, v in items[:MAX_ITEMS])
        if len(items) > MAX_ITEMS:
            out["…"] = "%d more" % (len(items) - MAX_ITEMS)
        return out
    if isinstance(value, (list, tuple)):
        items = list(value)
        return [plain(v, depth + 1) for v in items[:MAX_ITEMS]] + (["…"] if len(items) > MAX_ITEMS else [])
    return str(value)[:MAX_TEXT]


def typed(value):
    """(the value as answered, its type as the job gets it). A list or dict (OmegaConf's ListConfig, DictConfig) is
    answered as itself, its interpolations unresolved: no setting the doctor reads takes one, and job.config quotes
    it."""
    if value is None:
        return None, "null"
    if isinstance(value, bool):
        return value, "bool"
    if isinstance(value, (int, float)):
        return plain(value), type(value).__name__
    if isinstance(value, str):
        return value[:MAX_TEXT], "str"
    kind = "dict" if hasattr(value, "items") else "list" if hasattr(value, "__iter__") else type(value).__name__
    try:
        from omegaconf import OmegaConf

        container = OmegaConf.to_container(value, resolve=False) if OmegaConf.is_config(value) else value
        return plain(container), kind
    except BaseException:  # a container OmegaConf cannot copy (nested past the recursion limit): its type only
        return ({"…": "not read"} if kind == "dict" else ["…"]), kind


class _Refused(Exception):
    pass


def hydra_refuses(argv):
    """Hydra's own argument parser (the one its `@hydra.main` runs before composing: hydra._internal.utils
    get_args_parser) over the entry's words, or None when it takes them. Its refusal, as Hydra prints it
    ("unrecognized arguments: b=2" for overrides on both sides of --config-name), else None (taken, or a Hydra without
    that parser: not judged)."""
    if not isinstance(argv, list):
        return None
    try:
        from hydra._internal.utils import get_args_parser

        parser = get_args_parser()
    except BaseException:
        return None

    def error(message):
        raise _Refused(message)

    parser.error = error  # argparse prints the usage and exits; the message is what is wanted
    try:
        parser.parse_args([str(w) for w in argv])
    except _Refused as exc:
        return cut_text("error: %s" % exc, MAX_MESSAGE)
    except SystemExit:  # --help, --version: it prints and exits without training
        return "it prints and exits without training (--help, --hydra-help or --version)"
    except BaseException as exc:
        return _message(exc)
    return None


def _message(exc):
    return cut_text("%s: %s" % (type(exc).__name__, exc), MAX_MESSAGE)


def compose_config(folder, name, words, extra_dir=None):
    """The config Hydra composes from `folder`'s `name` with the override `words`, as the entry's @hydra.main does
    (with --config-dir's `extra_dir` in front of the main search path, as Hydra's own main adds it). Hydra's and
    OmegaConf's errors propagate. The settings probe (dsv4probe_settings) composes with it too."""
    from hydra import compose, initialize_config_dir

    if not extra_dir:
        with initialize_config_dir(config_dir=folder, version_base=None):
            return compose(config_name=name, overrides=words)
    # As Hydra's own main does for --config-dir (hydra/_internal/utils.py, _run_hydra's add_conf_dir).
    from hydra import version as hydra_version
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.errors import SearchPathException
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    backup = get_gh_backup()
    try:
        hydra_version.setbase(None)
        search_path = create_config_search_path(search_path_dir=folder)
        if not os.path.isdir(extra_dir):
            raise SearchPathException("Additional config directory '%s' not found" % extra_dir)
        search_path.prepend(provider="command-line", path="file://" + extra_dir,
                            anchor=SearchPathQuery(provider="schema"))
        Hydra.create_main_hydra2(task_name="app", config_search_path=search_path)
        return compose(config_name=name, overrides=words)
    finally:
        restore_gh_from_backup(backup)


def answer(request):
    out = {"hydra": None, "omegaconf": None, "settings": {}, "error": None}
    entry_file = request.get("entry_file")
    try:
        deco_path, deco_name = decorator_config(entry_file)
    except (OSError, SyntaxError, ValueError) as exc:
        out["error"] = {"kind": "entry", "message": "cannot read the entry module: " + _message(exc)}
        return out
    out["entry_config"] = {"config_path": deco_path, "config_name": deco_name}
    config_path = request.get("config_path") or deco_path
    config_name = request.get("config_name") or deco_name
    if config_name is None or config_path is None:
        out["error"] = {"kind": "entry", "message": "the entry module has no @hydra.main(config_path=..., "
                                                    "config_name=...) the doctor can read"}
        return out
    if str(config_name).endswith(".yaml"):
        config_name = str(config_name)[:-5]
    base = os.path.dirname(os.path.realpath(entry_file))
    config_dir = config_path if os.path.isabs(config_path) else os.path.normpath(os.path.join(base, config_path))
    default_dir = os.path.normpath(os.path.join(base, deco_path)) if deco_path else None
    out["config_dir"], out["config_name"] = config_dir, config_name
    stage("import hydra")
    try:
        import hydra
        import omegaconf
        from omegaconf import OmegaConf
    except BaseException as exc:  # a broken install is an answer too
        out["import_error"] = error_info(exc)
        return out
    out["hydra"] = getattr(hydra, "__version__", "?")
    out["omegaconf"] = getattr(omegaconf, "__version__", "?")
    # The overrides and the command's `env K=V` values (they may hold secrets) come in the request, a file only the
    # doctor's user reads.
    words = request.get("words") if isinstance(request.get("words"), dict) else {}
    for name in words.get("env_unset") or ():
        os.environ.pop(name, None)
    os.environ.update({str(k): str(v) for k, v in (words.get("env_set") or {}).items()})
    overrides = [str(w) for w in words.get("overrides") or ()]
    refused = hydra_refuses(words.get("argv"))
    if refused is not None:  # the job's @hydra.main would stop here, before composing anything
        out["error"] = {"kind": "arguments", "type": "argparse", "message": refused}
        return out

    extra_dir = request.get("extra_config_dir")  # --config-dir / -cd: a search path in front of the main one

    def composed(folder, name, words, extra_dir=extra_dir):
        return compose_config(folder, name, words, extra_dir)

    stage("compose")
    try:
        cfg = composed(config_dir, config_name, overrides)
    except BaseException as exc:  # Hydra's and OmegaConf's own errors: the job's failure, with their message
        out["error"] = {"kind": "compose", "type": type(exc).__name__, "message": cut_text(str(exc), MAX_MESSAGE)}
        return out
    keys = [k for k in (override_key(w) for w in overrides) if k]
    # A --config-dir's files come before verl's own (a ppo_trainer.yaml there replaces verl's): a named file too.
    named_file = bool(request.get("config_path") or request.get("config_name") or extra_dir)
    default = None
    if named_file and default_dir:
        # verl's own composition (its entry's config with its Megatron engine, the command's group choices): what
        # is not verl's default came from the config file the command names.
        groups = list(request.get("default_groups") or ()) + [
            w for w in overrides if "=" in w and "." not in w.split("=", 1)[0] and not w.startswith(("+", "~"))]
        try:
            default = composed(default_dir, deco_name, groups, extra_dir=None)
        except BaseException:
            default = None
    missing_env_fails = request.get("missing_env") == "error"
    marker = object()
    stage("select")
    for path in request.get("select") or ():
        try:
            value = OmegaConf.select(cfg, path, default=marker, throw_on_resolution_failure=True)
        except BaseException as exc:
            message = _message(exc)
            if missing_env_fails or "Environment variable" not in message:
                out["settings"][path] = {"error": message}
            else:
                out["settings"][path] = {"not_known": message}
            continue
        if value is marker:
            continue
        shown, kind = typed(value)
        if any(path == k or path.startswith(k + ".") or k.startswith(path + ".") for k in keys):
            source = "override"
        elif named_file:
            try:
                before = OmegaConf.select(default, path, default=marker) if default is not None else marker
            except BaseException:
                before = marker
            source = "default" if before is not marker and before == value and \
                type(before) is type(value) else "config file"
        else:
            source = "default"
        out["settings"][path] = {"value": shown, "type": kind, "source": source}
    return out


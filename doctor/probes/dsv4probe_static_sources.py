"""`ast` summaries of source files: classes, their fields and methods, functions and their parameters, capability
gates, attribute reads and assignments; a source over the read limit is parsed up to a whole statement.

A part of the static probe (dsv4probe_static.py), loaded by path (dsv4probe_common.load_module).
"""

import ast
import hashlib
import os
import re
import time

from dsv4probe_common import ReadRefused, load_module, parse_python  # in sys.modules: it loads this part

HERE = os.path.dirname(os.path.realpath(__file__))
load_module("dsv4probe_static_installed", HERE)
# The part just loaded by path, read from sys.modules (never looked up on sys.path):
from dsv4probe_static_installed import locate_module, read_bounded

SOURCE_LIMIT = 1 << 23


def _unparse(node):
    unparse = getattr(ast, "unparse", None)
    if unparse is None:
        return getattr(node, "id", None) or type(node).__name__
    try:
        return unparse(node)
    except Exception:
        return type(node).__name__


def _params(fn):
    args = fn.args
    names = [a.arg for a in getattr(args, "posonlyargs", [])] + [a.arg for a in args.args]
    names += [a.arg for a in args.kwonlyargs]
    return {
        "params": names,
        "varargs": args.vararg.arg if args.vararg else None,
        "varkw": args.kwarg.arg if args.kwarg else None,
        "lineno": fn.lineno,
    }


def _class_summary(node):
    fields, assigns, methods = [], [], {}
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            fields.append({"name": item.target.id, "annotation": _unparse(item.annotation),
                           "default": _unparse(item.value) if item.value is not None else None,
                           "lineno": item.lineno})
        elif isinstance(item, ast.Assign):
            for target in item.targets:
                if isinstance(target, ast.Name):
                    assigns.append(target.id)
        elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            methods[item.name] = _params(item)
    return {
        "bases": [_unparse(b) for b in node.bases],
        "decorators": [_unparse(d) for d in node.decorator_list],
        "fields": fields,
        "assigns": assigns,
        "methods": methods,
        "lineno": node.lineno,
    }


def _attribute_reads(tree, owners):
    """Every `owner.attr` read in the module, per owner name (e.g. DSA.indexer_forward_wrapper)."""
    found = {o: set() for o in owners}
    if not owners:
        return {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in found:
            found[node.value.id].add(node.attr)
    return {o: sorted(names) for o, names in found.items()}


_GATE_NAME = "COMPUTE_CAPABILITY"
_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def _literal(node):
    """An int or a tuple of ints written in the source, else None."""
    try:
        value = ast.literal_eval(node)
    except Exception:
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, tuple) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    return None


def _names_in(node):
    return set(n.id for n in ast.walk(node) if isinstance(n, ast.Name))


def capability_gates(tree):
    """A module's compute-capability gate, as written: the module-level constants whose name says
    COMPUTE_CAPABILITY (value and line), every comparison that uses one (operator, the other side, line), and the
    f-strings that name one (their literal parts and expressions, to rebuild the message an error would carry)."""
    constants = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) and node.value is not None else []
        for target in targets:
            if isinstance(target, ast.Name) and _GATE_NAME in target.id:
                constants[target.id] = {"value": _literal(node.value), "lineno": node.lineno}
    imported = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            imported.update(a.asname or a.name for a in node.names if _GATE_NAME in a.name)
    known = set(constants) | imported
    compares, messages = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right = node.left, node.comparators[0]
            for mine, other, flip in ((right, left, False), (left, right, True)):
                used = _names_in(mine) & known
                if used and not (_names_in(other) & known):
                    op = _OPS.get(type(node.ops[0]))
                    if op and flip:
                        op = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)
                    compares.append({"constant": sorted(used)[0], "op": op, "subject": _unparse(other),
                                     "constant_expr": _unparse(mine), "lineno": node.lineno})
                    break
        elif isinstance(node, ast.JoinedStr) and (_names_in(node) & known):
            parts = []
            for value in node.values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    parts.append({"text": value.value})
                elif isinstance(value, ast.FormattedValue):
                    parts.append({"expr": _unparse(value.value)})
            messages.append({"parts": parts, "lineno": node.lineno})
    return {"constants": constants, "imported": sorted(imported), "compares": compares, "messages": messages}


FACT_CAPS = {"imports": 50, "calls": 100, "compares": 50, "catches": 20}
TEXT_CAP = 200  # characters of one call, comparison, exception or assignment target
VALUE_CAP = 500  # characters of one assigned value
LOCALS_CAP = 200  # local names of one function


def _text(node, limit, cut):
    """`node` as source text, at most `limit` characters; a text that was cut is counted in `cut` (a list of one
    int): a cut call or value is not what the source says (`x.get_device_capability` may end past the cut)."""
    text = _unparse(node)
    if len(text) > limit:
        cut[0] += 1
        return text[:limit]
    return text


def _function_facts(fn):
    """What a module-level function does, for rules read from code: the names it imports inside its body
    (`from cudnn import DSA` -> "cudnn:DSA"), the calls it makes, its comparisons and the exceptions it catches.
    Each list is capped (FACT_CAPS) and the cap said in `capped` (what each held, and `texts_cut`: how many texts
    were cut at TEXT_CAP): a name not in a capped list is not known to be absent."""
    imports, calls, compares, catches = [], [], [], []
    cut = [0]
    for node in ast.walk(fn):
        if isinstance(node, ast.ImportFrom) and node.module:
            imports += ["%s:%s" % (node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            imports += [a.name for a in node.names]
        elif isinstance(node, ast.Call):
            calls.append(_text(node.func, TEXT_CAP, cut))
        elif isinstance(node, ast.Compare):
            compares.append(_text(node, TEXT_CAP, cut))
        elif isinstance(node, ast.ExceptHandler):
            catches.append(_text(node.type, TEXT_CAP, cut) if node.type is not None else "")
    facts = {"imports": imports, "calls": calls, "compares": compares, "catches": catches}
    capped = {}
    for field, limit in FACT_CAPS.items():
        if len(facts[field]) > limit:
            capped[field] = len(facts[field])
            facts[field] = facts[field][:limit]
    if cut[0]:
        capped["texts_cut"] = cut[0]
    if capped:
        facts["capped"] = capped
    return facts


def _assignments(tree, attributes):
    """Every `obj.attr = value` for the wanted attribute names, with the simple local assignments (`name = expr`)
    of the function it is in, so that a rule such as `provider.apply_dsa_kernel_fusion = use_fusion` can be followed
    back to what decides it."""
    wanted = set(attributes)
    out = []
    if not wanted:
        return out
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        local, hits, names, cut = {}, [], set(), [0]
        for node in ast.walk(fn):
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names.add(target.id)
                    if len(local) < LOCALS_CAP and target.id not in local:
                        local[target.id] = _text(node.value, VALUE_CAP, cut)
                elif isinstance(target, ast.Attribute) and target.attr in wanted:
                    hits.append({"attribute": target.attr, "target": _text(target, TEXT_CAP, cut),
                                 "value": _text(node.value, VALUE_CAP, cut), "lineno": node.lineno})
        # The caps said (a local past LOCALS_CAP, or a value cut at VALUE_CAP, is not what the function says).
        capped = {}
        if len(names) > len(local):
            capped["locals"] = len(names)
        if cut[0]:
            capped["texts_cut"] = cut[0]
        for hit in hits:
            out.append(dict(hit, function=fn.name, locals=local, **({"capped": capped} if capped else {})))
    return out  # capped (and the cap said) by _capped


# A top-level statement starts a line with neither indentation nor a closing bracket; a cut just before one ends
# the statements above it (a comment line does not: a body may go on after one), unless the line sits inside a
# string or a bracket: then the parse fails and an earlier cut is tried, further back each time (1, 4, 16 ... lines
# of such starts), since a cut inside a long string fails at every line of it. Few tries: each parses up to the
# read limit (seconds on a loaded host for 8 MiB), so no try starts past _PREFIX_SECONDS.
_TOP_LEVEL_LINE = re.compile(rb"\n(?=[A-Za-z_@])")
_PREFIX_TRIES = 6
_PREFIX_SECONDS = 10.0


def parse_prefix(raw, path):
    """(the longest prefix of a cut-off source that ends a top-level statement and parses, its ast) or (b"", None)."""
    cuts = [m.start() + 1 for m in _TOP_LEVEL_LINE.finditer(raw)]
    tried, start = 0, time.monotonic()
    while cuts and tried < _PREFIX_TRIES and (tried == 0 or time.monotonic() - start < _PREFIX_SECONDS):
        cut = cuts.pop()
        tried += 1
        try:
            return raw[:cut], parse_python(raw[:cut], path)
        except ReadRefused:
            # The first cut stays, and is the last try: the first top-level statements at least.
            del cuts[1 if tried == _PREFIX_TRIES - 1 else len(cuts) - min(len(cuts) - 1, (1 << (2 * tried - 2)) - 1):]
    return b"", None


def source_facts(module, needles, owners=(), attributes=()):
    where = locate_module(module)
    if not where.get("found"):
        return {"found": False, "missing": where.get("missing"), "error": where.get("error")}
    path = where.get("origin")
    if not path or not path.endswith(".py"):
        return {"found": True, "path": path, "error": "no Python source to read (%s)" % where.get("kind")}
    result = {"found": True, "path": path, "error": None}
    try:
        raw, size = read_bounded(path, SOURCE_LIMIT)
    except OSError as exc:
        result["error"] = "%s: %s" % (type(exc).__name__, exc)
        return result
    if size > len(raw):
        # What lies past the bound is not known, so `error` stays set: a rule that needs the whole file does not
        # judge it. The definitions before the bound are still read: a signature found there is a fact.
        result["truncated"] = True
        raw, tree = parse_prefix(raw, path)
        result["read_bytes"] = len(raw)
        read = ("its first %d bytes (%d lines) were read, the rest not judged" % (len(raw), raw.count(b"\n"))
                if tree is not None else "no run of whole statements before it parsed; not judged")
        result["error"] = "source truncated: larger than the %d-byte read limit (%d bytes); %s" % (
            SOURCE_LIMIT, size, read)
        if tree is None:
            return result
    else:
        try:
            tree = parse_python(raw, path)
        except ReadRefused as exc:
            # Non-UTF-8 without a coding cookie, nesting too deep to compile: not read, and said so (never empty).
            result["error"] = exc.cause or str(exc)
            return result
        result["sha256"] = hashlib.sha256(raw).hexdigest()
    text = raw.decode("utf-8", errors="replace")
    classes, functions, names = {}, {}, []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = _class_summary(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = _params(node)
            if attributes:
                functions[node.name].update(_function_facts(node))
        elif isinstance(node, ast.Assign):
            names.extend(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    result.update(classes=classes, functions=functions, names=names,
                  contains={needle: True for needle in needles if needle in text} if result.get("truncated")
                  else {needle: needle in text for needle in needles},
                  attributes=_attribute_reads(tree, owners))
    if _GATE_NAME in text:
        result["capability"] = capability_gates(tree)
    if attributes:
        result["assignments"] = _assignments(tree, attributes)
    return _capped(result)


# Every list and mapping of a summary is capped, and the cap said (`capped`: what each held before it): a huge
# module's names otherwise filled the probe's answer past its limit, and the whole answer was lost.
CAPS = {"names": 4000, "classes": 1000, "functions": 2000, "assignments": 20}
CLASS_CAPS = {"fields": 500, "assigns": 500, "methods": 500, "bases": 50, "decorators": 50}
ATTRIBUTES_CAP = 1000


def _cap(value, limit):
    if isinstance(value, dict):
        return dict(list(value.items())[:limit])
    return value[:limit]


def _capped(result):
    capped = {}
    for field, limit in CAPS.items():
        value = result.get(field)
        if isinstance(value, (list, dict)) and len(value) > limit:
            capped[field] = len(value)
            result[field] = _cap(value, limit)
    for name, summary in (result.get("classes") or {}).items():
        for field, limit in CLASS_CAPS.items():
            value = summary.get(field)
            if isinstance(value, (list, dict)) and len(value) > limit:
                capped["classes.%s.%s" % (name, field)] = len(value)
                summary[field] = _cap(value, limit)
    # A function's own lists (calls, imports ...) and an assignment's locals and values: capped where they are
    # made (_function_facts, _assignments), the cap said here too, so that the whole summary reads as incomplete.
    for name, facts in (result.get("functions") or {}).items():
        for field, count in (facts.get("capped") or {}).items():
            capped["functions.%s.%s" % (name, field)] = count
    for i, hit in enumerate(result.get("assignments") or []):
        for field, count in (hit.get("capped") or {}).items():
            capped["assignments.%d.%s" % (i, field)] = count
    for owner, names in (result.get("attributes") or {}).items():
        if len(names) > ATTRIBUTES_CAP:
            capped["attributes.%s" % owner] = len(names)
            result["attributes"][owner] = names[:ATTRIBUTES_CAP]
    if capped:
        # What was left out is not known: a name not in a capped list is not known to be absent.
        result["capped"] = capped
        result["truncated"] = True
        shown = ", ".join("%s: %d" % item for item in list(capped.items())[:5])
        result["error"] = ((result["error"] + "; ") if result.get("error") else "") + (
            "summary capped (%s%s; the rest not sent, not judged)" % (shown, ", ..." if len(capped) > 5 else ""))
    return result

"""Unit tests of the pure parts: sanitising, redaction and output hygiene (in-process, no subprocess)."""

from __future__ import annotations

import time

import pytest

from dsv4_doctor.hostio.redact import (MASK, Redactor, cap, clean_text, decode, looks_secret,
                                       neutralize_workflow_commands, sanitize)


@pytest.mark.parametrize("name, secret", [
    ("DB_PASS", True), ("PGPASSWORD", True), ("MY_CREDS", True), ("AWS_SESSION_TOKEN", True), ("FOO_SESSION", True),
    ("SSH_PRIVATE_KEY", True), ("NCCL_IB_PASSWD", True), ("HF_TOKEN", True), ("API_KEY", True), ("DB_PWD", True),
    ("XDG_SESSION_ID", False), ("XDG_SESSION_TYPE", False), ("TOKENIZERS_PARALLELISM", False), ("PWD", False),
    ("OLDPWD", False), ("MAX_TOKEN_LENGTH", False), ("MONKEY", False), ("NCCL_DEBUG", False), ("KEYBOARD", False),
    # these leaked before redaction covered them
    ("SSHPASS", True), ("DBPASS", True), ("S_PW", True), ("S_PRIVKEY", True), ("PASSTHROUGH", False),
    ("CI_JOB_JWT", True), ("CI_JOB_JWT_V2", True),
])
def test_secret_names(name, secret):
    assert looks_secret(name) is secret


def test_short_secret_values_are_masked_in_the_listing_and_replaced_elsewhere_from_four_characters():
    r = Redactor({"DB_PASS": "hunterpw", "NCCL_IB_PASSWD": "abcd", "X_TOKEN": "abc", "FLAG_SECRET": "true"})
    tree = r({"variables": {"DB_PASS": "hunterpw", "X_TOKEN": "abc", "FLAG_SECRET": "true"},
              "message": "connect with hunterpw and abcd; abc stays; true stays"})
    assert tree["variables"] == {"DB_PASS": MASK, "X_TOKEN": MASK, "FLAG_SECRET": MASK}
    assert tree["message"] == f"connect with {MASK} and {MASK}; abc stays; true stays"


def test_a_secret_value_is_masked_in_its_quoted_forms_too():
    """An error message showing repr() of a value with a quote and a backslash leaked it."""
    import json

    value = "pa'ss\\word55"
    r = Redactor({"REPR_PASSWORD": value})
    for shown in (value, repr(value), json.dumps(value), f"error: {value!r} rejected"):
        assert "word55" not in r.text(shown), shown


@pytest.mark.parametrize("text, leaked", [
    ("clone https://ghp_abcdefghijklmnopqrstuvwxyz@github.com/x", "ghp_abc"),
    ("https://TOKEN123@host/path", "TOKEN123"),
    ("postgres://user:pw1234@db:5432/x", "pw1234"),
    ("Authorization: Bearer abcdefgh12345678", "abcdefgh12345678"),
    ("sent as Token abcd1234efgh in the log", "abcd1234efgh"),
    ("sent as bearer abcdefghijklmnopqrstuvwx", "abcdefghijklmnopqrstuvwx"),
    ('password = "correct horse battery staple"', "horse"),
    ("curl --token s3cr3tflagvalue https://x", "s3cr3tflagvalue"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n(no end marker)", "MIIEow"),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijklmnop", "eyJzdWIi"),
    # a raw `@` in the password left its rest readable
    ("https://user:p@ss@host/x", "ss@host"),
    ("pip install git+https://ci:t0k@n@@gitlab.example/x.git", "n@"),
    # an assignment inside another's value was never looked at
    ("(RuntimeError: HF_TOKEN=abcdef123456)", "abcdef123456"),
    ("x=API_KEY=abc123", "abc123"),
    ("url=https://h/p?a=1&access_key=zz9zz9", "zz9zz9"),
    # a terminal escape inside a token hid it from the patterns, and the cleaning after them joined it again
    ("hf_\x1b[0mABCDEFGHIJKLMNOPQRSTUVWXYZ0123", "MNOPQRS"),
    ("HF_TOKEN=\x1b[1mabcdefgh123\x1b[0m", "abcdefgh123"),
])
def test_redaction_nets(text, leaked):
    out = Redactor({})(text)
    assert leaked not in out and MASK in out


ADVERSARIAL = {
    "assignment": "a" * 1_000_000,
    "assignment-runs": "a=" * 500_000,
    "assignment-chains": "a:b=" * 250_000,
    "secret-assignment-chains": "TOKEN=TOKEN=" * 80_000,
    "flags": "-" * 1_000_000,
    "flag-words": "--x " * 250_000,
    "url": "https://" + "u" * 1_000_000,
    "urls": "x://" * 250_000,
    "pem": "-----BEGIN RSA PRIVATE KEY-----" * 30_000,
    "ansi": "\x1b]" * 500_000,
    "bearer": "Bearer " * 150_000,
    "surrogates": "\ud800" * 500_000,
    # Token shapes (otherwise: a JWT could start after every `-` of one run, 9.4 s for this one).
    "jwt": "eyJaaaaaaaa-" * 20_000,
    "jwt-dots": "eyJaaaaaaaa." * 80_000,
    "jwt-segments": "eyJaaaaaaaa.eyJbbbbbbbb-" * 40_000,
    "token-prefixes": "sk-glpat-xoxb-hf_ghp_" * 50_000,
    "userinfo-ats": "x://" + "@" * 1_000_000,
    "userinfo-runs": ("x://" + "user:pw" * 3 + "@") * 40_000,
}


@pytest.mark.parametrize("kind", sorted(ADVERSARIAL))
def test_one_megabyte_of_hostile_text_is_processed_within_a_second(kind):
    text = ADVERSARIAL[kind]
    start = time.process_time()  # CPU seconds of this process: what linearity is about, whatever else runs
    tree = Redactor({"DB_PASS": "hunterpw"})(sanitize({"summary": text, "details": text}))
    for value in tree.values():
        clean_text(value)
    assert time.process_time() - start < 1.0
    assert len(tree["summary"]) < 20_000  # capped where it entered, with a marker (unless masked or removed whole)
    assert "truncated by dsv4-doctor" in tree["summary"] or kind in ("ansi", "pem")


@pytest.mark.slow  # real wheels, end to end: the default suite stays near 120 s on 2 cores
def test_redaction_itself_is_linear_without_the_cap():
    """Caps keep inputs small; the patterns must not need them (16 KiB at a quadratic rate would still stall)."""
    for text in ADVERSARIAL.values():
        start = time.process_time()
        Redactor({})(text, limit=10 ** 7)
        assert time.process_time() - start < 2.0


def test_the_fix_script_caps_descriptions_before_redacting_them():
    """A METADATA with 2000 long requirement names made `fix` take 7.3 s, its script's comments
    being redacted whole before they were cut to one line."""
    from dsv4_doctor.fix import plan as fixplan
    from dsv4_doctor.model.core import CheckReport, Fix, Status
    from dsv4_doctor.report.script import render_script

    desc = "missing: " + ", ".join(f"req-{i:04d}-" + "x" * 200 for i in range(2000))
    reports = [CheckReport(id=f"c.{i}", title="t", status=Status.FAIL, summary="s",
                           fixes=[Fix(desc + " DB_PASS=hunterpw", [["pip", "install", f"x{i}"]])]) for i in range(20)]
    start = time.process_time()
    script = render_script(fixplan.build_plan(reports), "/usr/bin/python3", {}, "1", Redactor({}))
    assert time.process_time() - start < 1.0
    assert script.count("req-0000-") == 20 and "pip install x19" in script  # wrapped: on the line after "missing:"


def test_a_fix_command_with_a_secret_is_withheld_whole_in_a_report():
    """Its printed form and its argv: `--token VALUE` is two words that each look harmless."""
    import json

    from dsv4_doctor.model.core import Fix
    from dsv4_doctor.hostio.redact import WITHHELD

    fix = Fix("d", [["pip", "install", "--token", "v4lue123"], ["pip", "install", "PASSWORD='x9z"],
                    ["pip", "install", "a b"]])
    shown = Redactor({})({"fixes": [fix.to_dict()]})["fixes"][0]
    assert shown["commands"] == [WITHHELD, WITHHELD, "pip install 'a b'"]
    assert shown["argv"] == [[MASK], [MASK], ["pip", "install", "a b"]]
    assert "v4lue123" not in json.dumps(shown) and "x9z" not in json.dumps(shown)


def test_a_fix_command_whose_environment_holds_a_secret_is_withheld_in_a_report():
    """A command's `NAME=value` environment is printed with it: its secret reached the JSON, text and markdown
    reports' `commands` in the clear while the script withheld the command."""
    import json

    from dsv4_doctor.model.core import Command, Fix
    from dsv4_doctor.hostio.redact import WITHHELD

    token = "hf_abcdefghijklmnopqrstuvwxyz0123"
    fix = Fix("d", [Command(("pip", "install", "x==1"), env=(("HF_TOKEN", token),)),
                    Command(("pip", "install", "y==2"), env=(("CPLUS_INCLUDE_PATH", "${CUDA_HOME}/include/cccl"),))])
    shown = Redactor({})({"fixes": [fix.to_dict()]})["fixes"][0]
    assert shown["commands"] == [WITHHELD, 'CPLUS_INCLUDE_PATH="${CUDA_HOME:-/usr/local/cuda}/include/cccl" pip '
                                           "install y==2"]
    assert shown["argv"] == [[MASK], ["pip", "install", "y==2"]]
    assert token not in json.dumps(shown)


def test_a_url_keeps_its_host_and_path_after_a_password_with_an_at_sign():
    assert Redactor({})("https://user:p@ss@host/a@b?c=d@e") == f"https://{MASK}@host/a@b?c=d@e"


def test_a_cut_log_tail_drops_the_partial_line_it_starts_in(tmp_path):
    """A stderr tail that began in the middle of a secret showed the rest of it (its start, which
    redaction recognises, was cut off). Every place that cuts a log's tail drops the partial first line."""
    from dsv4_doctor.fleet import torchstore as fleettransport
    from dsv4_doctor.engine.plugins import log_tail
    from dsv4_doctor.engine.probes import STDERR_TAIL_BYTES, _tail
    from dsv4_doctor.hostio.redact import read_tail

    log = tmp_path / "log"
    log.write_bytes(b"Authorization: Bearer " + b"s3cr3tv4lue" * 1000 + b"\nthe last line\n")
    for tail in (_tail(str(log)), log_tail(str(log)), fleettransport._tail(str(log)), read_tail(str(log), 5000)):
        assert "v4lue" not in tail and "the last line" in tail and "earlier output cut" in tail, tail
    log.write_bytes(b"x" * (STDERR_TAIL_BYTES * 3))  # one line longer than the tail: nothing of it
    assert "x" not in _tail(str(log)).replace("earlier output cut by dsv4-doctor", "")
    log.write_bytes(b"short\nlog\n")  # not cut: as is
    assert _tail(str(log)) == "short\nlog" and read_tail(str(log), 100) == "short\nlog\n"


def test_undecodable_bytes_and_lone_surrogates_become_visible_escapes():
    assert decode(b"bad \xff\xfe byte") == "bad \\xff\\xfe byte"
    assert sanitize("caf\udce9") == "caf\\xe9"  # os.environ's surrogateescape
    assert sanitize("lone \ud800 here") == "lone \\ud800 here"
    assert sanitize(["\ud800"])[0].encode("utf-8")
    assert clean_text("x\ud800y").encode("utf-8")


def test_sanitize_bounds_cycles_depth_size_and_odd_objects():
    loop: dict = {}
    loop["self"] = loop
    assert sanitize(loop) == {"self": "…[cycle]"}
    deep: list = []
    node = deep
    for _ in range(100):
        node.append([])
        node = node[0]
    assert "nested too deep" in str(sanitize(deep))
    wide = [[[i] * 100 for i in range(100)] for _ in range(100)]
    assert "more data truncated" in str(sanitize(wide, max_nodes=10_000))

    class Unprintable:
        def __str__(self):
            raise RuntimeError("no")

    assert sanitize({"x": Unprintable(), "n": float("nan"), "big": 2 ** 80}) == {
        "x": "<unprintable Unprintable>", "n": "nan", "big": str(2 ** 80)}


def test_workflow_commands_and_escapes_are_neutralised():
    text = "ok\n::error::x\n\u3000::warning file=a::y\n##[error]z\nnot::this ##[group]g"
    out = neutralize_workflow_commands(text)
    assert [line.lstrip()[:2] for line in out.splitlines()] == ["ok", "\\:", "\\:", "#\\", "no"]
    assert "##[" not in out
    assert clean_text("\x1b[31mred\x1b[0m \x1b]0;title\x07 bell\x07 nul\x00") == "red  bell\\x07 nul\\x00"


def test_cap_marks_what_it_cut():
    assert cap("x" * 10, 4) == "…[10 more characters truncated by dsv4-doctor]"  # never part of a word
    assert cap("abc defghij", 6) == "abc …[7 more characters truncated by dsv4-doctor]"
    assert cap("short", 10) == "short"


def test_bidirectional_overrides_become_visible_escapes():
    """U+202E passed through and could make a report line display other than it reads."""
    assert clean_text("pass\u202eliaf") == "pass\\u202eliaf"
    assert "\u2066" not in clean_text("a\u2066b")


def test_a_scheme_word_in_prose_is_not_a_credential():
    """Found when explain began to be checked word for word: "MoE token dispatchers" read "token ***REDACTED***"."""
    text = 'Megatron accepts only the alltoall and flex MoE token dispatchers ("sequence_packing only supports")'
    assert Redactor({}).text(text) == text

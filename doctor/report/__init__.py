"""A run's report, from the session's outcome to bytes: assembly and redaction (assemble.py), the format dispatch
(dispatch.py), the writer (output.py) apart from the emitter (emitter.py), and one module per format (terminal,
markdown, junit, github, script, explain, rules, text, live). Only terminal.py, live.py and explain.py import rich;
JSON, JUnit and markdown never do. It may import model/, hostio/, fix/ and upstream/, never engine/ or commands/
(assemble.py, which reads the session's outcome, is the one exception, one layer up)."""

"""The command line: the typer app (main.py), its grammar (grammar.py: every option, its type and help), shell
completion and the help prose. It parses, calls a use case in commands/ and maps the outcome to an exit code; it may
import every package below it, and nothing imports it but launch.py and __main__.py."""

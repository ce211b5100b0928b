"""A training command's settings: read once (`command.parse`), typed (`model.Job`), judged by checks/job_checks.py."""

"""The grader's parts (``scripts/grade.py`` puts them together): reading the files (cells,
parse), the teacher's flags (integrity, similarity), the cases and the course secret (cases,
draw, secret), the sandbox (sandbox, cgroup, standins, runner), the judge, the sheet."""

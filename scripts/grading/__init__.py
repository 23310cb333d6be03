"""The grader's parts (``scripts/grade.py`` puts them together): cells, integrity and rules
from the syntax tree, the cases and the course secret, the sandbox and its runner, the
judge, the sheet."""

# Run first in every kernel nbval starts (PYTHONSTARTUP, set by notebooks/conftest.py): the
# chapters' training calls are read from the cache where they can be keyed exactly
# (gpt_from_scratch.book.run_cache). It leaves no name in the notebook's namespace.
import gpt_from_scratch.book.run_cache

gpt_from_scratch.book.run_cache.install()
del gpt_from_scratch

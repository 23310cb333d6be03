"""Speed benchmarks: ratios against a reference run in the same process. Never part of the tests."""

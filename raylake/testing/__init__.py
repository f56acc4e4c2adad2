"""Helpers for tests and benchmarks of raylake and of code built on it (needs the test extra)."""

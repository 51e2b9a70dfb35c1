"""Batch schedulers, one module each: pure functions that render a job's header lines, build the
submit, status and cancel commands and read their output, and describe a job's resources."""

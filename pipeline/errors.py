"""Errors a pipeline user can cause: each one becomes a one-line message and a non-zero exit code."""

from __future__ import annotations


class PipelineError(Exception):
    """Bad input (not a store, empty store, unwritable output, bad option); the message says what to fix."""

    exit_code = 2


class NotAStoreError(PipelineError):
    """The path does not hold a raftmq / RocketMQ store directory."""


class EmptyStoreError(PipelineError):
    """The store directory exists but its commit log holds no message."""


class OutputError(PipelineError):
    """The output directory cannot be created or written, or would overwrite something."""

"""Asking before a deletion that cannot be undone (``channel delete``, ``cluster
channels remove --delete-topics``, ``cluster delete``): on a terminal the command
asks; elsewhere (a script, a pipe) it refuses unless ``--yes`` says the question was
answered."""

from __future__ import annotations

import sys

from streamwal.errors import InvalidInputError

__all__ = ["NotConfirmedError", "confirm"]


class NotConfirmedError(InvalidInputError):
    """A destructive action nobody confirmed: declined at the prompt, or asked where
    no one can answer (stdin is not a terminal) without ``--yes``."""


def confirm(question: str, *, yes: bool) -> None:
    """Ask ``question`` on a terminal; :class:`NotConfirmedError` unless answered yes
    (or ``--yes`` was given). Not on a terminal there is nobody to ask, and a default
    of yes would let a pipe or a cron job delete what nobody meant to."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise NotConfirmedError(
            f"refusing to {question} without confirmation: stdin is not a terminal "
            "(pass --yes to confirm)"
        )
    try:
        answer = input(f"{question}? [y/N] ")
    except (EOFError, KeyboardInterrupt):
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise NotConfirmedError("not confirmed: nothing was deleted")

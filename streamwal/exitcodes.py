"""The exit codes every ``streamwal`` command follows (docs/cli.md, "Exit codes").

One rule, so a script can act on the code without knowing the command: 1 says the
command ran and what it did failed (trying again later may work), 2 says it could not
run as given (fix the command line, the configuration or the installation first),
3 says what it names does not exist (a typo, a wrong prefix: waiting will not help).
``verify`` and ``channel status`` only read, and a log they cannot read is an input
they cannot use: 2. Their 1 is ``verify``'s violations.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from streamwal.errors import ConfigError, StreamwalError

__all__ = ["FAILED", "INTERRUPTED", "NOT_FOUND", "OK", "PIPE_CLOSED", "USAGE", "exit_code"]

#: it did what was asked
OK = 0
#: it ran and failed: a node that could not start or stopped on an error, an action
#: refused or not finished in time, a write that failed, violations found by ``verify``
FAILED = 1
#: it could not run as given: a usage error, a configuration that does not load (an
#: unknown key, a bad value, a file that cannot be read), a missing extra; and for the
#: read-only checks (``verify``, ``channel status``) a log that cannot be read
USAGE = 2
#: what it names does not exist: a channel (no topic, not in the cluster's channel set,
#: not open on the node asked), or any cluster under the key prefix
NOT_FOUND = 3
#: stopped by Ctrl-C (SIGINT)
INTERRUPTED = 130
#: its output was piped into a reader that quit early (``head``)
PIPE_CLOSED = 141


def exit_code(
    command: Callable[[], int],
    prefix: str,
    *,
    not_found: tuple[type[StreamwalError], ...] = (),
) -> int:
    """``command``'s own code, or the rule's for what it raised: one of ``not_found``
    :data:`NOT_FOUND`, a configuration that does not load :data:`USAGE`, any other
    error of ours :data:`FAILED`; the message goes to stderr after ``prefix``, never
    as a traceback."""
    try:
        return command()
    except not_found as exc:
        print(f"{prefix}: {exc}", file=sys.stderr)
        return NOT_FOUND
    except ConfigError as exc:
        print(f"{prefix}: invalid configuration: {exc}", file=sys.stderr)
        return USAGE
    except StreamwalError as exc:
        print(f"{prefix}: {exc}", file=sys.stderr)
        return FAILED

"""A script as a Redis function library (FUNCTION LOAD, FCALL): its includes' functions made once.

Redis runs an EVAL script's whole text on every call, so every function of its includes is made
again each time (a closure made, later collected): measured on Redis 7.0, about 0.3 µs a
function, 13 µs of a one-job lease call's and 22 µs of an ack with lease_next's Redis time
(more on a busy machine). A function library's top level runs once, when it is loaded; what
it registers runs per call. So the library keeps the script's meaning with its parts moved:

- every top-level name of the includes is declared once, as a local of the library;
- the includes' functions are defined once, at load (they read those names when they run);
- the includes' values (the KEYS and ARGV names, constants, a call's own state such as the
  events it emits) are assigned again at the start of each call, in their order, by small
  functions of their own (a Lua function may have at most 60 upvalues);
- the script's own text (after its includes) is the registered function's body, KEYS and ARGV
  the call's keys and arguments;
- ``use_keys(keys, args)`` is what binds them: the body runs it first with the call's own, and
  may run it again with another queue's keys and prefix (include/base.lua queue_keys) to act on
  that queue with the same helpers, once it has finished with the first (a single server only:
  keys of two queues are in two Cluster slots). Only a function has it: an EVAL script's values
  are its top level's, made once, and its ``use_keys`` is nil (echomq_http.store.scripts
  Rendered.text), so that the includes can tell.

Includes hold only local definitions (echomq_http.store.luatrim), so this split is exact: a value is
reassigned before any function can read it in a call, as it was when the whole text ran.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from echomq_http.store.luatrim import definitions

_FUNCTION_START = re.compile(r"^local\s+function\s+", re.MULTILINE)
_LOCAL_START = re.compile(r"^local\s+", re.MULTILINE)
_NAME = re.compile(r"[A-Za-z_]\w*")
_COMMENT = re.compile(r"--[^\n]*")
# Names a binder may refer to, at most (Lua 5.1 allows 60 upvalues; counting every name in its
# text, keywords and globals included, overcounts, so the limit is never reached).
_BINDER_NAMES = 50
# The library's function that binds KEYS, ARGV and the includes' values (see the module).
USE_KEYS = "use_keys"


def library_name(operation: str, sha: str) -> str:
    """One name per script text: two service versions in a rolling deploy never share one."""
    return f"emq_{operation.replace('-', '_')}_{sha[:16]}"


def library(name: str, includes: Sequence[str], body: str, *, read_only: bool) -> str:
    """The library text of a script: its includes (as inlined, trimmed) and its own text."""
    names: list[str] = ["KEYS", "ARGV", USE_KEYS]  # declared first: the includes may call it
    functions: list[str] = []
    values: list[tuple[str, set[str]]] = []
    for include in includes:
        for part in definitions(include)[1]:
            names += sorted(part.names - set(names))
            code = part.text
            if _FUNCTION_START.search(_COMMENT.sub("", code)):
                functions.append(_FUNCTION_START.sub("function ", code, count=1))
            else:
                statement = _LOCAL_START.sub("", code, count=1)
                values.append((statement, set(_NAME.findall(_COMMENT.sub("", statement)))))
    binders, calls = [], []
    for number, statements in enumerate(_binder_groups(values)):
        binders.append(f"local function bind_{number}()\n{''.join(statements)}end\n")
        calls.append(f"bind_{number}()\n")
    binders.append(f"function {USE_KEYS}(keys, args)\nKEYS, ARGV = keys, args\n{''.join(calls)}end\n")
    flags = "{'no-writes'}" if read_only else "{}"
    return (
        f"#!lua name={name}\n"
        f"local {', '.join(names)}\n"
        + "".join(functions)
        + "".join(binders)
        + f"redis.register_function{{function_name = '{name}', flags = {flags},\n"
        + "callback = function(keys, args)\n"
        + f"{USE_KEYS}(keys, args)\n"
        + body
        + "\nend}\n"
    )


def _binder_groups(values: list[tuple[str, set[str]]]) -> list[list[str]]:
    """The value statements in order, cut into runs that each name at most _BINDER_NAMES names."""
    groups: list[list[str]] = []
    seen: set[str] = set()
    for statement, used in values:
        if not groups or len(seen | used) > _BINDER_NAMES:
            groups.append([])
            seen = set()
        groups[-1].append(statement)
        seen |= used
    return groups

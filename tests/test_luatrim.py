"""The loader keeps of an include only what a script uses (echomq_http.store.luatrim)."""

import re

import pytest

from echomq_http.store.luatrim import definitions, trimmed
from echomq_http.store.scripts import lua_dir, render

INCLUDE = """-- The include's opening comment.

local A, B = KEYS[1], KEYS[2]
local LIMIT = 10 -- used by nobody here

-- Uses A.
local function first(x) return A .. x end

-- Uses first, so A too.
local function second(x)
  return first(x) .. LIMIT_NOT_A_NAME_HERE
end
local function unused() return B end
"""


def test_keeps_what_is_used_and_what_that_uses_in_order() -> None:
    kept = trimmed(INCLUDE, "return second('x')")
    assert "local function second" in kept
    assert "local function first" in kept
    assert "local A, B" in kept  # first uses A
    assert "-- Uses A." in kept  # a definition keeps its comment
    assert "LIMIT = 10" not in kept
    assert "unused" not in kept
    assert kept.index("local A, B") < kept.index("function first") < kept.index("function second")
    assert kept.startswith("-- The include's opening comment.")


def test_a_name_in_a_comment_does_not_count() -> None:
    assert "function first" not in trimmed(INCLUDE, "-- first(x) would be nice\nreturn 1")


def test_an_include_statement_that_is_not_a_definition_is_refused() -> None:
    with pytest.raises(ValueError, match="only local definitions"):
        trimmed("local A = 1\nlocal B\n", "return A")


@pytest.mark.parametrize("path", sorted(lua_dir().glob("*.lua")), ids=lambda path: path.name)
def test_every_script_defines_every_local_function_it_calls(path) -> None:
    # A function left out would be a call of a nil global: Redis would fail the script at run time.
    source = render(path)
    defined = set(re.findall(r"local function (\w+)", source))
    called = set(re.findall(r"(?<![\w.:])([a-z_]\w*)\(", source))
    lua_globals = {"tonumber", "tostring", "ipairs", "pairs", "unpack", "type", "error", "assert", "pcall"}
    lua_globals.add("use_keys")  # the function library's own (store/luafunctions.py); nil under EVAL
    keywords = {"function", "if", "return", "and", "or", "not", "elseif", "until", "while", "in"}
    assert called - defined - lua_globals - keywords == set()


_USED_NAME = re.compile(r"(?<![.:\w])[A-Za-z_]\w*")  # not a field (g.ring) nor a method
_COMMENT = re.compile(r"--[^\n]*")
_STRING = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
_INCLUDE_LINE = re.compile(r"^-- @include ([a-z_]+)$", re.MULTILINE)


def test_every_file_names_the_includes_that_define_what_it_uses() -> None:
    """An include's definitions are Lua locals, visible only below them: a file that uses a name
    of an include it does not name (nor any include it names, in turn) would find it undefined
    on the EVAL path, or trimmed away, in a script that happens to inline them the other way."""
    include_dir = lua_dir() / "include"
    defined_in = {
        name: path.stem
        for path in include_dir.glob("*.lua")
        for part in definitions(path.read_text())[1]
        for name in part.names
    }

    def named(path):
        return set(_INCLUDE_LINE.findall(path.read_text()))

    def reachable(path):
        seen, todo = set(), list(named(path))
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo += named(include_dir / f"{name}.lua")
        return seen

    for path in [*lua_dir().glob("*.lua"), *include_dir.glob("*.lua")]:
        own = path.stem if path.parent == include_dir else None
        used = set(_USED_NAME.findall(_STRING.sub("", _COMMENT.sub("", path.read_text()))))
        needed = {defined_in[name] for name in used if name in defined_in} - {own}
        assert needed <= reachable(path), (
            f"{path.name} names no include of {sorted(needed - reachable(path))}"
        )

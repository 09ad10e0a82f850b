"""An Ansible inventory's host pattern as Ansible expands it: `gpu[01:64]`, `node-[a:f]`,
`gpu[0:10:2]`, `rack[1:2]-gpu[01:08]`, and a `:PORT` after the name, without ansible-inventory.

Ansible's own rule (its inventory plugins' `expand_hostname_range`), kept exactly, since a range
read any other way names other machines:

- the first `[BEGIN:END]` or `[BEGIN:END:STEP]` is expanded, then the result again while it
  holds another `[` (ranges multiply, left to right); any `[` starts a range, so `[abc]` is an
  error, not a name;
- BEGIN may be empty (0); END may not; STEP defaults to 1;
- a BEGIN with a leading zero (`01`) is a width: every number is zero-filled to it, and END
  must be written as wide (`[01:64]`, not `[01:100]`);
- letters count through `a..zA..Z` (`[a:c]`, and `[x:B]`: z is followed by A), BEGIN after END
  being an error; numbers count up only: `[9:1]`, like a negative step, is no host at all, as
  in Ansible; a step of 0 is an error.

A trailing `:PORT` (`gpu[01:04]:2222`, `db:5432`) is the port, as Ansible's address parser
takes it: set as the host's `ansible_port` before the line's own variables. Pure: the caller
says where the pattern was written (its errors name that place).
"""

from __future__ import annotations

import re
import string

# Ansible's address parser: `[HOST]:PORT` (an IPv6 address), or a host whose colons are all
# inside complete `[...]` ranges, then `:PORT`.
_BRACKETED_PORT = re.compile(r"\[(.+)\]:([0-9]+)")
_HOST_PORT = re.compile(r"((?:[^:\[\]]|\[[^\]]*\])+):([0-9]+)")


class RangeError(ValueError):
    """The pattern is no host range Ansible accepts; the message says why, in its words."""


def split_port(token: str) -> tuple[str, int | None]:
    """(host pattern, port): `gpu[01:04]:2222`, `db:5432`, `[fe80::1]:22`; a bare IPv6 address
    (colons outside any range) has no port."""
    found = _BRACKETED_PORT.fullmatch(token) or _HOST_PORT.fullmatch(token)
    return (found[1], int(found[2])) if found else (token, None)


def expand(pattern: str) -> list[str]:
    """Every host name `pattern` stands for, in Ansible's order; a name with no `[` is itself."""
    if "[" not in pattern:
        return [pattern]
    parts = pattern.replace("[", "|", 1).replace("]", "|", 1).split("|")
    if len(parts) != 3:
        raise RangeError(f"host range {pattern!r} is not NAME[BEGIN:END] or NAME[BEGIN:END:STEP]")
    head, inside, tail = parts
    bounds = inside.split(":")
    if len(bounds) not in (2, 3):
        raise RangeError(f"host range {pattern!r} must be begin:end or begin:end:step")
    begin, end = bounds[0] or "0", bounds[1]
    if not end:
        raise RangeError(f"host range {pattern!r} must specify an end value")
    try:
        step = int(bounds[2]) if len(bounds) == 3 else 1
    except ValueError:
        raise RangeError(f"host range {pattern!r}: step {bounds[2]!r} is not a number") from None
    if step == 0:
        raise RangeError(f"host range {pattern!r}: step must not be 0")
    width = len(begin) if begin[0] == "0" and len(begin) > 1 else 0
    if width and width != len(end):
        raise RangeError(f"host range {pattern!r} must specify equal-length begin and end formats")
    letters = string.ascii_letters
    seq: list[str]
    if begin in letters and end in letters:  # str.index, as Ansible's: a substring counts
        i_begin, i_end = letters.index(begin), letters.index(end)
        if i_begin > i_end:
            raise RangeError(f"host range {pattern!r} must have begin <= end")
        seq = list(letters[i_begin : i_end + 1 : step])
    else:
        try:
            numbers = range(int(begin), int(end) + 1, step)
        except ValueError:
            raise RangeError(
                f"host range {pattern!r}: {begin}:{end} is neither numbers nor letters"
            ) from None
        seq = [str(n).zfill(width) for n in numbers]
    out: list[str] = []
    for item in seq:
        out += expand(f"{head}{item}{tail}")
    return out

"""Typed subjects: scope entries, off-limits entries and touched values compared by meaning.

A glob over raw text lets the same machine through under another spelling (`XN--...`, `0x0a090909`,
`10.20.0.evil.com`, `/v1/../admin`). So every entry and every value is read once into one of four
types, and only values and entries of the same type are compared:

- `host`: a DNS name as IDNA 2008 A-labels, lower case, without the trailing dot.
- `ip`: an address or a range (IPv4 kept as its IPv4-mapped IPv6 range, so one integer interval
  holds both families and `::ffff:10.9.9.9` is `10.9.9.9`).
- `url`: scheme, host (a `host` or an `ip`), port, and a normalised path.
- `name`: anything else (`customer:vip-1`), matched by glob as before.

How text is read (`read_value`, and `read_pattern` for entries; docs/policies.md has the table):
text is NFKC-folded, its default-ignorable code points dropped, and the Unicode full stops become
`.`; then it is a URL when it contains
`://`; a value is refused when it is a URL written another way (`//host`, `https:host`); an IPv6
address when it is hex digits and at least two `:`; an IPv4 address when the part before its
first `/` or `:` ends in a number (the WHATWG URL rule: the last label is decimal or
`0x` hex); a host when that part holds a dot and a letter or digit; a name otherwise. Text that
looks like an address, host or URL but is not a valid one raises SubjectError: a call carrying it
is refused with `invalid_arguments`, a policy entry is a load error. Only canonical dotted quads
are IPv4 addresses, so `167641093`, `0x0a090909`, `10.9.2313` and `010.9.9.9` are refused, never
guessed at.

A name also carries the host a URL parser would find in it (`localhost:8080` is the host
`localhost`; `Subject.machine`), which off-limits weighs too; a name that holds a login before a
host, a percent-escaped host or a bracketed address is refused. A host carries its IDNA 2003
spelling beside its IDNA 2008 one when they differ (`Subject.alt`: `weiß` is also `weiss`), and a
URL its path with slash look-alikes kept beside the path that reads them as `/` (`alt_path`):
off-limits refuses when any reading matches, scope admits only when every reading is inside.

Everything here runs at policy load, except `read_value`, once per touched value per call.
"""

from checkpoint.policy.subjects.errors import KINDS, Kind, SubjectError
from checkpoint.policy.subjects.folding import fold
from checkpoint.policy.subjects.globs import GlobMatcher, glob_to_regex
from checkpoint.policy.subjects.hosts import normalise_host
from checkpoint.policy.subjects.offlimits import OffLimits
from checkpoint.policy.subjects.paths import map_look_alikes, normalise_path
from checkpoint.policy.subjects.patterns import ANY, Pattern, read_pattern
from checkpoint.policy.subjects.scope import SubjectSet
from checkpoint.policy.subjects.subject import Subject
from checkpoint.policy.subjects.urls import DEFAULT_PORTS
from checkpoint.policy.subjects.values import plain_name, read_value

__all__ = [
    "ANY",
    "DEFAULT_PORTS",
    "GlobMatcher",
    "KINDS",
    "Kind",
    "OffLimits",
    "Pattern",
    "Subject",
    "SubjectError",
    "SubjectSet",
    "fold",
    "glob_to_regex",
    "map_look_alikes",
    "normalise_host",
    "normalise_path",
    "plain_name",
    "read_pattern",
    "read_value",
]

# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The Kubernetes CEL libraries as cel-python functions, for the emulator's independent CEL path.

Written from upstream's sources at the versions apiextensions-apiserver v0.34.10 builds its CEL environment with
(k8s.io/apiserver v0.34.10 pkg/cel/environment/base.go): k8s.io/apiserver pkg/cel/library (urls.go, regex.go,
lists.go, quantity.go, ip.go, cidr.go, format.go, semverlib.go), and cel-go v0.26.0's extensions ext/strings.go
(version 2), ext/sets.go, ext/lists.go (version 3) and the optional types (cel.OptionalTypes). Never from krops'
plugins/module_utils/cel.py, which this path checks.

cel-python resolves a function by its name alone, so one Python function serves every overload of a name and
dispatches on the receiver's type; a namespaced call (``ip.isCanonical(s)``, ``format.dns1123Label()``,
``optional.none()``, ``sets.contains(a, b)``, ``lists.range(n)``) is a method on a namespace value bound in the
activation (:data:`NAMESPACES`). Regular expressions are RE2 (google-re2), as Go's regexp and cel-go's matches are.

Not provided, so a rule that reaches them is an "undeclared reference" the emulator refuses: macros cel-python's
grammar cannot add (``optMap``, ``optFlatMap``, ``sortBy``, two-variable comprehensions), the optional syntax
(``x.?f``, ``m[?k]``, ``{?k: v}``, ``[?v]``), ``'...'.format(...)``, ``strings.quote``, ``type(...) == net.IP``
and the authorizer library (not offered to CRD rules).
"""

from __future__ import annotations

import datetime
import re

import re2
from celpy import celtypes
from celpy.evaluation import CELEvalError, function_contains

from tests.substrate import cel_k8s_values as v
from tests.substrate.cel_k8s_values import CelError

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


class Unsupported(Exception):  # noqa: N818 - not an error of the rule: the engine cannot run it
    """Raised (through cel-python, which lets it pass) when a rule reads a value this path does not build."""


class FormattedString:
    """A ``format: duration/date/date-time/byte`` string: reading it is :class:`Unsupported`, never a guess."""

    def __init__(self, fmt):
        self.fmt = fmt

    def _refuse(self, *args):
        raise Unsupported(f"a format: {self.fmt} string (CEL sees a typed value there)")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __len__ = __iter__ = __contains__ = _refuse
    __add__ = __radd__ = __str__ = __bool__ = __getitem__ = __getattr__ = _refuse
    __hash__ = None


def _refuse_formatted(args):
    for arg in args:
        if isinstance(arg, FormattedString):
            arg._refuse()
        if isinstance(arg, list):
            _refuse_formatted(arg)


class Namespace:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"<CEL namespace {self.name}>"


FORMAT, OPTIONAL, SETS, LISTS = Namespace("format"), Namespace("optional"), Namespace("sets"), Namespace("lists")
NAMESPACES = {"format": FORMAT, "optional": OPTIONAL, "sets": SETS, "lists": LISTS}


def _overload(*args):
    return CELEvalError("no such overload", TypeError, tuple(type(a).__name__ for a in args))


def _cel_function(fn):
    """A library function: a CelError becomes a CEL evaluation error, an unknown type 'no such overload'."""

    def wrapped(*args):
        for arg in args:
            if isinstance(arg, CELEvalError):
                return arg
        _refuse_formatted(args)
        try:
            return fn(*args)
        except CelError as exc:
            return CELEvalError(str(exc), CelError, (str(exc),))
        except (TypeError, AttributeError, KeyError, IndexError):
            return _overload(*args)

    wrapped.__name__ = fn.__name__
    return wrapped


def _str(value):
    if not isinstance(value, str):
        raise TypeError(value)
    return str(value)


def _int(value):
    if isinstance(value, bool | celtypes.BoolType | celtypes.UintType) or not isinstance(value, int):
        raise TypeError(value)
    return int(value)


B, I, S = celtypes.BoolType, celtypes.IntType, celtypes.StringType  # noqa: E741


# --- optional types (cel-go cel.OptionalTypes) ------------------------------------------------------------------


class Optional(celtypes.MessageType):
    """optional.of(v) / optional.none(). A MessageType only so that cel-python hands field selection to
    :meth:`get`: selecting a field of an optional gives an optional (none for none, or for a missing key)."""

    def __init__(self, present, value=None):
        super().__init__()
        self.present, self.value = present, value

    def get(self, field, default=None):
        if self.present and isinstance(self.value, dict) and field in self.value:
            return Optional(True, self.value[field])
        return NONE

    def __eq__(self, other):
        return isinstance(other, Optional) and (self.present, self.value) == (other.present, other.value)

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self.present)

    def __repr__(self):
        return f"optional.of({self.value!r})" if self.present else "optional.none()"


NONE = Optional(False)


def _is_zero(value):
    if value is None:
        return True
    if isinstance(value, Optional):
        return False
    if isinstance(value, celtypes.TimestampType):
        return value == celtypes.TimestampType("0001-01-01T00:00:00Z")
    if isinstance(value, celtypes.DurationType):
        return value == celtypes.DurationType(0)
    if isinstance(value, bool | int | float | str | bytes | list | dict):
        return not value
    return False


def _optional_of(ns, value):
    if ns is not OPTIONAL:
        raise TypeError(ns)
    return Optional(True, value)


def _optional_none(ns):
    if ns is not OPTIONAL:
        raise TypeError(ns)
    return NONE


def _optional_of_non_zero(ns, value):
    if ns is not OPTIONAL:
        raise TypeError(ns)
    return NONE if _is_zero(value) else Optional(True, value)


def _has_value(opt):
    if not isinstance(opt, Optional):
        raise TypeError(opt)
    return B(opt.present)


def _value(opt):
    if not isinstance(opt, Optional):
        raise TypeError(opt)
    if not opt.present:
        raise CelError("optional.none() dereference")
    return opt.value


def _or_value(opt, default):
    if not isinstance(opt, Optional):
        raise TypeError(opt)
    return opt.value if opt.present else default


def _or(opt, other):
    if not isinstance(opt, Optional) or not isinstance(other, Optional):
        raise TypeError(opt)
    return opt if opt.present else other


# --- IP and CIDR (pkg/cel/library/ip.go, cidr.go) ------------------------------------------------------------------


def _ip(value):
    if isinstance(value, v.CIDR):  # cidr_ip
        return v.IP(value.addr)
    return v.parse_ip(_str(value))


def _is_canonical(ns, text):
    if ns is not _FUNCTIONS_IP:
        raise TypeError(ns)
    raw = _str(text)
    return B(str(v.parse_ip(raw)) == raw)


def _is_ip(text):
    try:
        v.parse_ip(_str(text))
    except CelError:
        return B(False)
    return B(True)


def _is_cidr(text):
    try:
        v.parse_cidr(_str(text))
    except CelError:
        return B(False)
    return B(True)


def _ip_method(name):
    def method(ip):
        if not isinstance(ip, v.IP):
            raise TypeError(ip)
        return B(getattr(ip, name)())

    method.__name__ = name
    return method


def _family(ip):
    if not isinstance(ip, v.IP):
        raise TypeError(ip)
    return I(ip.family())


def _cidr(text):
    return v.parse_cidr(_str(text))


def _contains_ip(cidr, other):
    if not isinstance(cidr, v.CIDR):
        raise TypeError(cidr)
    return B(cidr.contains_ip(other if isinstance(other, v.IP) else v.parse_ip(_str(other))))


def _contains_cidr(cidr, other):
    if not isinstance(cidr, v.CIDR):
        raise TypeError(cidr)
    return B(cidr.contains_cidr(other if isinstance(other, v.CIDR) else v.parse_cidr(_str(other))))


def _prefix_length(cidr):
    if not isinstance(cidr, v.CIDR):
        raise TypeError(cidr)
    return I(cidr.bits)


def _masked(cidr):
    if not isinstance(cidr, v.CIDR):
        raise TypeError(cidr)
    return cidr.masked()


def _string(value):
    """string(): ip_to_string and cidr_to_string, else CEL's own conversion."""
    if isinstance(value, v.IP | v.CIDR):
        return S(str(value))
    if isinstance(value, v.Quantity | v.Semver | v.URL | Optional | Namespace):
        raise TypeError(value)
    return celtypes.StringType(value)


# --- quantity (pkg/cel/library/quantity.go) ---------------------------------------------------------------------


def _quantity(text):
    return v.parse_quantity(_str(text))


def _is_quantity(text):
    try:
        v.parse_quantity(_str(text))
    except CelError:
        return B(False)
    return B(True)


def _q(value):
    if not isinstance(value, v.Quantity):
        raise TypeError(value)
    return value


def _sign(q):
    return I(_q(q).sign())


def _as_approximate_float(q):
    return celtypes.DoubleType(_q(q).approximate_float())


def _as_integer(q):
    result = _q(q).as_int64()
    if result is None:
        raise CelError("cannot convert value to integer")
    return I(result)


def _is_integer(q):
    return B(_q(q).as_int64() is not None)


def _add(q, other):
    other = other if isinstance(other, v.Quantity) else v.Quantity(_int(other), 0)
    return _q(q).add(other)


def _sub(q, other):
    other = other if isinstance(other, v.Quantity) else v.Quantity(_int(other), 0)
    return _q(q).sub(other)


def _compare(a, b):
    """compareTo of two quantities or two semvers."""
    if isinstance(a, v.Quantity) and isinstance(b, v.Quantity):
        return a.cmp(b)
    if isinstance(a, v.Semver) and isinstance(b, v.Semver):
        return a.compare(b)
    raise TypeError(a)


def _is_greater_than(a, b):
    return B(_compare(a, b) == 1)


def _is_less_than(a, b):
    return B(_compare(a, b) == -1)


def _compare_to(a, b):
    return I(_compare(a, b))


# --- semver (pkg/cel/library/semverlib.go, SemverVersion(1)) ----------------------------------------------------


def _semver(text, normalize=False):
    if not isinstance(normalize, bool | celtypes.BoolType):
        raise TypeError(normalize)
    return v.parse_semver(_str(text), bool(normalize))


def _is_semver(text, normalize=False):
    try:
        _semver(text, normalize)
    except CelError:
        return B(False)
    return B(True)


def _semver_part(name):
    def part(version):
        if not isinstance(version, v.Semver):
            raise TypeError(version)
        return I(getattr(version, name))

    part.__name__ = name
    return part


# --- URLs (pkg/cel/library/urls.go) ----------------------------------------------------------------------------


def _url(text):
    raw = _str(text)
    try:
        v.parse_url(raw)  # ParseRequestURI first
        url = v.parse_url(raw.partition("#")[0], via_request=False)
    except CelError as exc:
        raise CelError(f"URL parse error during conversion from string: {exc}") from None
    return url


def _is_url(text):
    try:
        v.parse_url(_str(text))
    except CelError:
        return B(False)
    return B(True)


def _u(url):
    if not isinstance(url, v.URL):
        raise TypeError(url)
    return url


def _get_query(url):
    return celtypes.MapType({S(k): celtypes.ListType([S(x) for x in vals]) for k, vals in _u(url).query().items()})


# --- regex (pkg/cel/library/regex.go; cel-go matches) ----------------------------------------------------------

_COMPILED = {}


def _regex(pattern):
    pattern = _str(pattern)
    if pattern not in _COMPILED:
        try:
            _COMPILED[pattern] = re2.compile(pattern, _RE2_OPTIONS)
        except re2.error as exc:
            _COMPILED[pattern] = CelError(f"Illegal regex: {exc}")
    if isinstance(_COMPILED[pattern], CelError):
        raise _COMPILED[pattern]
    return _COMPILED[pattern]


def _matches(text, pattern):
    return B(_regex(pattern).search(_str(text)) is not None)


def _find(text, pattern):
    found = _regex(pattern).search(_str(text))
    return S(found.group(0) if found else "")


def _find_all(text, pattern, limit=-1):
    limit = _int(limit)
    found = [S(m.group(0)) for m in _regex(pattern).finditer(_str(text))]
    return celtypes.ListType(found if limit < 0 else found[:limit])


# --- lists (pkg/cel/library/lists.go; cel-go ext/lists.go version 3) --------------------------------------------


class TypedList(celtypes.ListType):
    """A list of an object's data, which knows its schema's item type (what cel-go's type checker knows)."""

    def __init__(self, items, item_type=None):
        super().__init__(items)
        self.item_type = item_type


def _list(value):
    if not isinstance(value, list):
        raise TypeError(value)
    return value


def _comparable(items):
    for item in items:
        if not isinstance(item, int | float | str | bytes | celtypes.TimestampType | celtypes.DurationType):
            raise TypeError(item)
    return items


def _is_sorted(values):
    items = _comparable(_list(values))
    return B(all(not (a > b) for a, b in zip(items, items[1:])))


def _sum(values):
    items = _list(values)
    if not items:  # the zero of the list's type: double for a list of numbers, else int (lists.go sum)
        return celtypes.DoubleType(0) if getattr(values, "item_type", None) == "number" else I(0)
    total = items[0]
    for item in items[1:]:
        total = total + item
    return total


def _min(values):
    items = _comparable(_list(values))
    if not items:
        raise CelError("min called on empty list")
    best = items[0]
    for item in items[1:]:
        best = item if best > item else best
    return best


def _max(values):
    items = _comparable(_list(values))
    if not items:
        raise CelError("max called on empty list")
    best = items[0]
    for item in items[1:]:
        best = item if best < item else best
    return best


def _index_of(target, item, offset=None):
    if isinstance(target, list):
        if offset is not None:
            raise TypeError(offset)
        return I(next((i for i, x in enumerate(target) if x == item), -1))
    return I(_string_index_of(_str(target), _str(item), 0 if offset is None else _int(offset)))


def _last_index_of(target, item, offset=None):
    if isinstance(target, list):
        if offset is not None:
            raise TypeError(offset)
        return I(next((i for i in range(len(target) - 1, -1, -1) if target[i] == item), -1))
    text, sub = _str(target), _str(item)
    if offset is None:
        if not sub:
            return I(len(text))
        if len(text.encode()) < len(sub.encode()):
            return I(-1)
        offset = len(text) - 1
    return I(_string_last_index_of(text, sub, _int(offset)))


def _slice(values, start, end):
    items, start, end = _list(values), _int(start), _int(end)
    if start < 0 or end < 0:
        raise CelError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise CelError(f"cannot slice({start}, {end}), start index must be less than or equal to end index")
    if len(items) < end:
        raise CelError(f"cannot slice({start}, {end}), list is length {len(items)}")
    return celtypes.ListType(items[start:end])


def _flatten_items(items, depth):
    if depth < 0:
        raise CelError("level must be non-negative")
    found = []
    for item in items:
        if isinstance(item, list) and depth > 0:
            found += _flatten_items(item, depth - 1)
        else:
            found.append(item)
    return found


def _flatten(values, depth=1):
    return celtypes.ListType(_flatten_items(_list(values), _int(depth)))


def _sort(values):
    items = _list(values)
    if items and not isinstance(items[0], int | float | str | bytes | celtypes.TimestampType | celtypes.DurationType):
        raise CelError("list elements must be comparable")
    if any(type(x) is not type(items[0]) for x in items):
        raise CelError("list elements must have the same type")
    return celtypes.ListType(sorted(items))


def _range(ns, count):
    if ns is not LISTS:
        raise TypeError(ns)
    return celtypes.ListType([I(i) for i in range(_int(count))])


def _reverse(values):
    return celtypes.ListType(list(reversed(_list(values))))


def _distinct(values):
    unique = []
    for item in _list(values):
        if not any(item == seen for seen in unique):
            unique.append(item)
    return celtypes.ListType(unique)


# --- sets (cel-go ext/sets.go) ---------------------------------------------------------------------------------------


def _contains(target, *args):
    """sets.contains(list, sublist), else CEL's own contains (string.contains)."""
    if target is SETS:
        whole, sub = (_list(a) for a in args)
        return B(all(any(item == x for x in whole) for item in sub))
    return function_contains(target, *args)


def _equivalent(ns, a, b):
    if ns is not SETS:
        raise TypeError(ns)
    return B(bool(_contains(SETS, a, b)) and bool(_contains(SETS, b, a)))


def _intersects(ns, a, b):
    if ns is not SETS:
        raise TypeError(ns)
    return B(any(any(item == x for x in _list(b)) for item in _list(a)))


# --- strings (cel-go ext/strings.go, version 2) -----------------------------------------------------------------

_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(chr(c) for c in range(0x2000, 0x200B))


def _char_at(text, index):
    text, index = _str(text), _int(index)
    if index < 0 or index > len(text):
        raise CelError(f"index out of range: {index}")
    return S(text[index : index + 1])


def _string_index_of(text, sub, offset):
    if not sub:
        return offset
    if offset < 0:
        raise CelError(f"index out of range: {offset}")
    if offset >= len(text):
        return -1
    return text.find(sub, offset)


def _string_last_index_of(text, sub, offset):
    if not sub:
        return offset
    if offset < 0:
        raise CelError(f"index out of range: {offset}")
    if offset >= len(text):
        return -1
    offset = min(offset, len(text) - len(sub))
    for index in range(offset, -1, -1):
        if text[index : index + len(sub)] == sub:
            return index
    return -1


def _lower_ascii(text):
    return S("".join(c.lower() if c.isascii() else c for c in _str(text)))


def _upper_ascii(text):
    return S("".join(c.upper() if c.isascii() else c for c in _str(text)))


def _replace(text, old, new, count=-1):
    count = _int(count)
    return S(_str(text).replace(_str(old), _str(new), count if count >= 0 else -1))


def _split(text, sep, limit=-1):
    text, sep, limit = _str(text), _str(sep), _int(limit)
    if limit == 0:
        return celtypes.ListType([])
    if sep == "":
        parts = list(text)
        if 0 < limit < len(parts):
            parts = parts[: limit - 1] + ["".join(parts[limit - 1 :])]
    else:
        parts = text.split(sep, limit - 1 if limit > 0 else -1)
    return celtypes.ListType([S(p) for p in parts])


def _substring(text, start, end=None):
    text, start = _str(text), _int(start)
    if end is None:
        if start < 0 or start > len(text):
            raise CelError(f"index out of range: {start}")
        return S(text[start:])
    end = _int(end)
    if start > end:
        raise CelError(f"invalid substring range. start: {start}, end: {end}")
    for index in (start, end):
        if index < 0 or index > len(text):
            raise CelError(f"index out of range: {index}")
    return S(text[start:end])


def _trim(text):
    return S(_str(text).strip(_GO_SPACE))


def _join(values, sep=""):
    items, sep = _list(values), _str(sep)
    for item in items:
        if not isinstance(item, str):
            raise CelError(f"join: invalid input: {item}")
    return S(sep.join(items))


# --- format (pkg/cel/library/format.go over apimachinery's validators) ------------------------------------------

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = _LABEL + r"(\." + _LABEL + r")*"
_DNS1035 = r"[a-z]([-a-z0-9]*[a-z0-9])?"
_QNAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and"
    " end with an alphanumeric character"
)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must"
    " start and end with an alphanumeric character"
)
_DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic"
    " character, and end with an alphanumeric character"
)
_QNAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must"
    " start and end with an alphanumeric character"
)


def _regex_error(msg, fmt, *examples):
    """validation.RegexError."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    return msg + " (e.g. " + " or ".join(f"'{e}', " for e in examples) + f"regex used for validation is '{fmt}')"


def _full(pattern, value):
    return re.fullmatch(pattern, value, re.ASCII) is not None


def _max_len(n):
    return f"must be no more than {n} characters"


def is_dns1123_label(value):
    errs = [_max_len(63)] if len(value) > 63 else []
    if not _full(_LABEL, value):
        errs.append(
            "must not contain dots"
            if _full(_SUBDOMAIN, value)
            else _regex_error(_LABEL_MSG, _LABEL, "my-name", "123-abc")
        )
    return errs


def is_dns1123_subdomain(value):
    errs = [_max_len(253)] if len(value) > 253 else []
    if not _full(_SUBDOMAIN, value):
        errs.append(_regex_error(_SUBDOMAIN_MSG, _SUBDOMAIN, "example.com"))
    return errs


def is_dns1035_label(value):
    errs = [_max_len(63)] if len(value) > 63 else []
    if not _full(_DNS1035, value):
        errs.append(_regex_error(_DNS1035_MSG, _DNS1035, "my-name", "abc-123"))
    return errs


def is_qualified_name(value):
    parts = value.split("/")
    errs = []
    if len(parts) > 2:
        return [
            "a qualified name "
            + _regex_error(_QNAME_MSG, _QNAME, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    name = parts[-1]
    if len(parts) == 2:
        if not parts[0]:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in is_dns1123_subdomain(parts[0])]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + _max_len(63))
    if not _full(_QNAME, name):
        errs.append("name part " + _regex_error(_QNAME_MSG, _QNAME, "MyName", "my.name", "123-abc"))
    return errs


def is_label_value(value):
    errs = [_max_len(63)] if len(value) > 63 else []
    if not _full("(" + _QNAME + ")?", value):
        errs.append(_regex_error(_VALUE_MSG, "(" + _QNAME + ")?", "MyValue", "my_value", "12345"))
    return errs


def _mask_trailing_dash(name):
    """apimachinery api/validation maskTrailingDash."""
    return name[:-2] + "a" if len(name) > 1 and name.endswith("-") else name


def _date_ok(text):
    """time.Parse("2006-01-02", s)."""
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
        return False
    try:
        datetime.date(int(text[:4]), int(text[5:7]), int(text[8:]))
    except ValueError:
        return False
    return True


def _datetime_ok(text):
    """kube-openapi strfmt IsDateTime."""
    if len(text) < 4:
        return False
    parts = text.lower().split("t")
    if len(parts) < 2 or not _date_ok(parts[0]):
        return False
    m = re.match(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$", parts[1])
    return bool(m) and m.group(1) <= "23" and m.group(2) <= "59" and m.group(3) <= "59"


_BASE64 = r"^(?:[A-Za-z0-9+\/]{4})*(?:[A-Za-z0-9+\/]{2}==|[A-Za-z0-9+\/]{3}=|[A-Za-z0-9+\/]{4})$"
_UUID = r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$"


def _uri_errors(text):
    try:
        v.parse_url(text)
    except CelError as exc:
        return [f'parse "{text}": {exc}']
    return []


FORMATS = {
    "dns1123Label": is_dns1123_label,
    "dns1123Subdomain": is_dns1123_subdomain,
    "dns1035Label": is_dns1035_label,
    "qualifiedName": is_qualified_name,
    "dns1123LabelPrefix": lambda s: is_dns1123_label(_mask_trailing_dash(s)),
    "dns1123SubdomainPrefix": lambda s: is_dns1123_subdomain(_mask_trailing_dash(s)),
    "dns1035LabelPrefix": lambda s: is_dns1035_label(_mask_trailing_dash(s)),
    "labelValue": is_label_value,
    "uri": _uri_errors,
    "uuid": lambda s: [] if re.match(_UUID, s) else ["does not match the UUID format"],
    "byte": lambda s: [] if re.match(_BASE64, s) else ["invalid base64"],
    "date": lambda s: [] if _date_ok(s) else ["invalid date"],
    "datetime": lambda s: [] if _datetime_ok(s) else ["invalid datetime"],
}


class Format:
    def __init__(self, name):
        self.name = name

    def __eq__(self, other):
        return isinstance(other, Format) and other.name == self.name

    def __hash__(self):
        return hash(self.name)


def _format_constant(name):
    def constant(ns):
        if ns is not FORMAT:
            raise TypeError(ns)
        return Format(name)

    constant.__name__ = name
    return constant


def _named(ns, name):
    if ns is not FORMAT:
        raise TypeError(ns)
    name = _str(name)
    return Optional(True, Format(name)) if name in FORMATS else NONE


def _validate(fmt, text):
    if not isinstance(fmt, Format):
        raise TypeError(fmt)
    errs = FORMATS[fmt.name](_str(text))
    return Optional(True, celtypes.ListType([S(e) for e in errs])) if errs else NONE


_RAW = {
    # optional types
    "of": _optional_of,
    "none": _optional_none,
    "ofNonZeroValue": _optional_of_non_zero,
    "hasValue": _has_value,
    "value": _value,
    "orValue": _or_value,
    "or": _or,
    # IP and CIDR
    "ip": _ip,
    "isCanonical": _is_canonical,
    "family": _family,
    "isUnspecified": _ip_method("is_unspecified"),
    "isLoopback": _ip_method("is_loopback"),
    "isLinkLocalMulticast": _ip_method("is_link_local_multicast"),
    "isLinkLocalUnicast": _ip_method("is_link_local_unicast"),
    "isGlobalUnicast": _ip_method("is_global_unicast"),
    "isIP": _is_ip,
    "cidr": _cidr,
    "containsIP": _contains_ip,
    "containsCIDR": _contains_cidr,
    "prefixLength": _prefix_length,
    "masked": _masked,
    "isCIDR": _is_cidr,
    "string": _string,
    # quantity
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "sign": _sign,
    "asApproximateFloat": _as_approximate_float,
    "asInteger": _as_integer,
    "isInteger": _is_integer,
    "add": _add,
    "sub": _sub,
    "isGreaterThan": _is_greater_than,
    "isLessThan": _is_less_than,
    "compareTo": _compare_to,
    # semver
    "semver": _semver,
    "isSemver": _is_semver,
    "major": _semver_part("major"),
    "minor": _semver_part("minor"),
    "patch": _semver_part("patch"),
    # URLs
    "url": _url,
    "isURL": _is_url,
    "getScheme": lambda u: S(_u(u).scheme),
    "getHost": lambda u: S(_u(u).host),
    "getHostname": lambda u: S(_u(u).split_host_port()[0]),
    "getPort": lambda u: S(_u(u).split_host_port()[1]),
    "getEscapedPath": lambda u: S(_u(u).escaped_path()),
    "getQuery": _get_query,
    # regex
    "matches": _matches,
    "find": _find,
    "findAll": _find_all,
    # lists
    "isSorted": _is_sorted,
    "sum": _sum,
    "min": _min,
    "max": _max,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "slice": _slice,
    "flatten": _flatten,
    "sort": _sort,
    "range": _range,
    "reverse": _reverse,
    "distinct": _distinct,
    # sets
    "contains": _contains,
    "equivalent": _equivalent,
    "intersects": _intersects,
    # strings
    "charAt": _char_at,
    "lowerAscii": _lower_ascii,
    "upperAscii": _upper_ascii,
    "replace": _replace,
    "split": _split,
    "substring": _substring,
    "trim": _trim,
    "join": _join,
    # format
    "named": _named,
    "validate": _validate,
    **{name: _format_constant(name) for name in FORMATS},
}

FUNCTIONS = {name: _cel_function(fn) for name, fn in _RAW.items()}
_FUNCTIONS_IP = FUNCTIONS["ip"]  # ``ip.isCanonical(s)``: the receiver is the ip function itself

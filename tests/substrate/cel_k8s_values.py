# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The value types of the Kubernetes CEL libraries, for the emulator's independent CEL path (cel-python).

Written from upstream's Go sources, not from krops' plugins/module_utils/cel.py:

- IP and CIDR: k8s.io/apiserver v0.34.10 pkg/cel/library/ip.go, cidr.go (parseIPAddr, parseCIDR) over Go's
  net/netip (ParseAddr, ParsePrefix, Addr.Is*), which these classes follow.
- Quantity: k8s.io/apimachinery v0.34.10 pkg/api/resource/quantity.go (parseQuantityString, ParseQuantity,
  Add, Sub, Cmp, AsInt64) and amount.go (int64Amount): a quantity is an int64 amount ``value * 10**scale`` while
  it fits, else an exact decimal (inf.Dec) rounded up to nano; only the int64 form answers AsInt64.
- Semver: github.com/blang/semver v4.0.0 (Parse, NewPRVersion, Compare), normalized as
  pkg/cel/library/semverlib.go normalizeAndParse does.
- URL: Go's net/url ParseRequestURI and Parse, as pkg/cel/library/urls.go uses them.

An error is raised as :class:`CelError`; the library turns it into a CEL evaluation error.
"""

from __future__ import annotations

import decimal
import ipaddress
import re
import urllib.parse

_INT64_MAX = (1 << 63) - 1
_INT64_MIN = -(1 << 63)


class CelError(Exception):
    """A CEL evaluation error raised by a library function (types.NewErr in the Go library)."""


# --- IP and CIDR (net/netip) ---------------------------------------------------------------------------------------

_V4_PART = re.compile(r"^(0|[1-9][0-9]{0,2})$")


def _parse_v4(text):
    parts = text.split(".")
    if len(parts) != 4 or not all(_V4_PART.match(p) and int(p) <= 255 for p in parts):
        raise ValueError(f"ParseAddr({text!r}): invalid IPv4 address")
    return ipaddress.IPv4Address(text)


def _parse_addr(text):
    """netip.ParseAddr: dotted IPv4 without leading zeros, or IPv6 (with an optional zone)."""
    if ":" not in text:
        return _parse_v4(text), ""
    body, _sep, zone = text.partition("%")
    if _sep and not zone:
        raise ValueError(f"ParseAddr({text!r}): zone must be a non-empty string")
    if "." in body:  # an embedded IPv4 tail is dotted decimal without leading zeros as well
        _parse_v4(body.rsplit(":", 1)[1])
    try:
        return ipaddress.IPv6Address(body), zone
    except ValueError as exc:
        raise ValueError(f"ParseAddr({text!r}): {exc}") from None


def parse_ip(raw):
    """pkg/cel/library/ip.go parseIPAddr: no zone, no IPv4-mapped IPv6."""
    try:
        addr, zone = _parse_addr(raw)
    except ValueError as exc:
        raise CelError(f"IP Address {raw!r} parse error during conversion from string: {exc}") from None
    if zone:
        raise CelError(f"IP address {raw!r} with zone value is not allowed")
    if addr.version == 6 and addr.ipv4_mapped is not None:
        raise CelError(f"IPv4-mapped IPv6 address {raw!r} is not allowed")
    return IP(addr)


class IP:
    """apiservercel.IP: a netip.Addr."""

    def __init__(self, addr):
        self.addr = addr

    def __eq__(self, other):
        return isinstance(other, IP) and other.addr == self.addr

    def __hash__(self):
        return hash(self.addr)

    def __str__(self):
        return str(self.addr)

    def family(self):
        return self.addr.version

    def is_unspecified(self):
        return int(self.addr) == 0

    def is_loopback(self):
        if self.addr.version == 4:
            return self.addr in ipaddress.IPv4Network("127.0.0.0/8")
        return int(self.addr) == 1

    def is_multicast(self):
        return self.addr.is_multicast  # 224.0.0.0/4, ff00::/8

    def is_link_local_multicast(self):
        if self.addr.version == 4:
            return self.addr in ipaddress.IPv4Network("224.0.0.0/24")
        return (int(self.addr) >> 112) & 0xFF0F == 0xFF02

    def is_link_local_unicast(self):
        if self.addr.version == 4:
            return self.addr in ipaddress.IPv4Network("169.254.0.0/16")
        return (int(self.addr) >> 118) == (0xFE80 >> 6)

    def is_global_unicast(self):
        """netip.Addr.IsGlobalUnicast: private addresses and ULAs count; broadcast does not."""
        if self.addr.version == 4 and int(self.addr) in (0, 0xFFFFFFFF):
            return False
        return not (self.is_unspecified() or self.is_loopback() or self.is_multicast() or self.is_link_local_unicast())


_BITS = re.compile(r"^(0|[1-9][0-9]*)$")


def parse_cidr(raw):
    """pkg/cel/library/cidr.go parseCIDR over netip.ParsePrefix: the address is kept as written (not masked)."""
    prefix = "network address parse error during conversion from string: network address parse error"
    text, sep, bits = raw.rpartition("/")
    if not sep:
        raise CelError(f"{prefix} during conversion from string: netip.ParsePrefix({raw!r}): no '/'")
    try:
        addr, zone = _parse_addr(text)
    except ValueError as exc:
        raise CelError(f"{prefix} during conversion from string: netip.ParsePrefix({raw!r}): {exc}") from None
    if zone:
        raise CelError(
            f"{prefix} during conversion from string: netip.ParsePrefix({raw!r}): IPv6 zones cannot be present in a prefix"
        )
    if not _BITS.match(bits) or int(bits) > addr.max_prefixlen:
        raise CelError(
            f"{prefix} during conversion from string: netip.ParsePrefix({raw!r}): bad bits after slash: {bits!r}"
        )
    if addr.version == 6 and addr.ipv4_mapped is not None:
        raise CelError(f"{prefix} during conversion from string: IPv4-mapped IPv6 address {raw!r} is not allowed")
    return CIDR(addr, int(bits))


class CIDR:
    """apiservercel.CIDR: a netip.Prefix (address as written, prefix length)."""

    def __init__(self, addr, bits):
        self.addr, self.bits = addr, bits

    def __eq__(self, other):
        return isinstance(other, CIDR) and (other.addr, other.bits) == (self.addr, self.bits)

    def __hash__(self):
        return hash((self.addr, self.bits))

    def __str__(self):
        return f"{self.addr}/{self.bits}"

    def network(self):
        return ipaddress.ip_network(f"{self.addr}/{self.bits}", strict=False)

    def contains_ip(self, ip):
        return ip.addr.version == self.addr.version and ip.addr in self.network()

    def contains_cidr(self, other):
        """Overlaps(other) and Bits() <= other.Bits(), as cidrContainsCIDR."""
        if other.addr.version != self.addr.version:
            return False
        return self.network().overlaps(other.network()) and self.bits <= other.bits

    def masked(self):
        return CIDR(self.network().network_address, self.bits)


# --- Quantity (apimachinery pkg/api/resource) -------------------------------------------------------------------

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_NANO = decimal.Decimal("1e-9")
_CONTEXT = decimal.Context(prec=1000, Emax=10**6, Emin=-(10**6))
_DIGITS = "0123456789"


def _parse_quantity_string(text):
    """parseQuantityString: (positive, value, num, denom, suffix); raises on a format error."""
    positive, pos, end = True, 0, len(text)
    if pos < end and text[0] in "+-":
        positive = text[0] != "-"
        pos += 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    if pos >= end:
        return positive, text, num, "", ""
    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, text, num, denom, ""
    value, suffix_start = text[:pos], pos
    while pos < end and text[pos] in "eEinumkKMGTP":
        pos += 1
    if pos >= end:
        return positive, value, num, denom, text[suffix_start:]
    if text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos >= end:
        return positive, value, num, denom, text[suffix_start:]
    raise CelError("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")


def _interpret(suffix):
    """suffixHandler.interpret: (base, exponent, binary)."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix], False
    if suffix in _BINARY:
        return 2, _BINARY[suffix], True
    if len(suffix) > 1 and suffix[0] in "eE" and re.match(r"^[+-]?[0-9]+$", suffix[1:]):
        return 10, int(suffix[1:]), False
    raise CelError("unable to parse quantity's suffix")


def parse_quantity(text):
    """resource.ParseQuantity."""
    with decimal.localcontext(_CONTEXT):
        return _parse_quantity(text)


def _parse_quantity(text):
    if not text:
        raise CelError("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    if text == "0":
        return Quantity(0, 0)
    positive, value, num, denom, suffix = _parse_quantity_string(text)
    base, exponent, binary = _interpret(suffix)
    mantissa, scale, precision = 1, exponent, 18 - (len(num) + len(denom))
    if binary:
        scale = 0
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1 if not denom else -1
        mantissa = 1 << exponent
    if precision >= 0:
        scale -= len(denom)
        if scale >= -9:
            shifted = int(num + denom) * mantissa
            if shifted <= _INT64_MAX:
                return Quantity(shifted if positive else -shifted, scale)
    amount = decimal.Decimal(value)
    amount = amount.scaleb(exponent) if base == 10 else amount * (1 << exponent)
    magnitude = abs(amount)
    if magnitude:
        magnitude = magnitude.quantize(_NANO, rounding=decimal.ROUND_UP) if magnitude % _NANO else magnitude
    if binary and magnitude > _INT64_MAX:
        magnitude = decimal.Decimal(_INT64_MAX)
    return Quantity.of_dec(-magnitude if amount < 0 else magnitude)


class Quantity:
    """resource.Quantity: an int64Amount (value, scale) or an exact decimal (``dec``)."""

    def __init__(self, value, scale, dec=None):
        self.value, self.scale, self.dec = value, scale, dec

    @classmethod
    def of_dec(cls, dec):
        return cls(None, None, dec)

    def as_dec(self):
        if self.dec is not None:
            return self.dec
        return decimal.Decimal(self.value).scaleb(self.scale, _CONTEXT)

    def cmp(self, other):
        a, b = self.as_dec(), other.as_dec()
        return (a > b) - (a < b)

    def __eq__(self, other):
        return isinstance(other, Quantity) and self.cmp(other) == 0

    def __hash__(self):
        return hash(self.as_dec())

    def sign(self):
        d = self.as_dec()
        return (d > 0) - (d < 0)

    def as_int64(self):
        """(value, ok): only an int64 amount with a scale >= 0 that fits converts (int64Amount.AsInt64)."""
        if self.dec is not None or self.scale < 0:
            return None
        result = self.value * 10**self.scale
        return result if _INT64_MIN <= result <= _INT64_MAX else None

    def add(self, other):
        if self.dec is None and other.dec is None:
            summed = _int64_add(self, other)
            if summed is not None:
                return summed
        return Quantity.of_dec(_CONTEXT.add(self.as_dec(), other.as_dec()))

    def sub(self, other):
        if self.dec is None and other.dec is None:
            summed = _int64_add(self, Quantity(-other.value, other.scale))
            if summed is not None and _INT64_MIN <= -other.value:
                return summed
        return Quantity.of_dec(_CONTEXT.subtract(self.as_dec(), other.as_dec()))

    def approximate_float(self):
        return float(self.as_dec())


def _int64_add(a, b):
    """int64Amount.Add: None when the sum overflows int64."""
    if b.value == 0:
        return Quantity(a.value, a.scale)
    if a.value == 0:
        return Quantity(b.value, b.scale)
    if a.scale == b.scale:
        value, scale = a.value + b.value, a.scale
    elif a.scale > b.scale:
        shifted = a.value * 10 ** (a.scale - b.scale)
        if not _INT64_MIN <= shifted <= _INT64_MAX:
            return None
        value, scale = shifted + b.value, b.scale
    else:
        shifted = b.value * 10 ** (b.scale - a.scale)
        if not _INT64_MIN <= shifted <= _INT64_MAX:
            return None
        value, scale = a.value + shifted, a.scale
    return Quantity(value, scale) if _INT64_MIN <= value <= _INT64_MAX else None


# --- Semver (blang/semver v4) -------------------------------------------------------------------------------------

_ALPHANUM = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789")


def _number(part, what):
    if not set(part) <= set(_DIGITS):
        raise CelError(f"Invalid character(s) found in {what} number {part!r}")
    if len(part) > 1 and part[0] == "0":
        raise CelError(f"{what.capitalize()} number must not contain leading zeroes {part!r}")
    if not part or int(part) >= 1 << 64:
        raise CelError(f'strconv.ParseUint: parsing "{part}": invalid syntax')
    return int(part)


def _pre_release(part):
    if not part:
        raise CelError("Prerelease is empty")
    if set(part) <= set(_DIGITS):
        return (0, _number(part, "Numeric PreRelease"), "")
    if set(part) <= _ALPHANUM:
        return (1, 0, part)
    raise CelError(f"Invalid character(s) found in prerelease {part!r}")


def parse_semver(text, normalize=False):
    if normalize:
        text = _normalize(text)
    if not text:
        raise CelError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise CelError("No Major.Minor.Patch elements found")
    major, minor = _number(parts[0], "major"), _number(parts[1], "minor")
    patch, _sep, build = parts[2].partition("+")
    patch, sep, pre = patch.partition("-")
    patch = _number(patch, "patch")
    pres = [_pre_release(p) for p in pre.split(".")] if sep else []
    for item in build.split(".") if _sep else []:
        if not item:
            raise CelError("Build meta data is empty")
        if not set(item) <= _ALPHANUM:
            raise CelError(f"Invalid character(s) found in build meta data {item!r}")
    return Semver(major, minor, patch, pres)


def _normalize(text):
    """semverlib.go normalizeAndParse: drop a leading v and leading zeros, fill a short version with .0."""
    text = text[1:] if text.startswith("v") else text
    parts = text.split(".", 2)
    for index, part in enumerate(parts):
        if len(part) > 1:
            part = part.lstrip("0")
            if not part or part[0] not in _DIGITS:
                part = "0" + part
            parts[index] = part
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise CelError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


class Semver:
    def __init__(self, major, minor, patch, pre):
        self.major, self.minor, self.patch, self.pre = major, minor, patch, pre

    def compare(self, other):
        a, b = (self.major, self.minor, self.patch), (other.major, other.minor, other.patch)
        if a != b:
            return 1 if a > b else -1
        if not self.pre or not other.pre:
            return (not self.pre) - (not other.pre)
        for mine, theirs in zip(self.pre, other.pre):
            if mine != theirs:
                return 1 if mine > theirs else -1
        return (len(self.pre) > len(other.pre)) - (len(self.pre) < len(other.pre))

    def __eq__(self, other):
        return isinstance(other, Semver) and self.compare(other) == 0

    def __hash__(self):
        return hash((self.major, self.minor, self.patch))


# --- URL (Go net/url) ---------------------------------------------------------------------------------------------

_SCHEME_REST = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.")
_HOST_OK = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~!$&'()*+,;=:[]<>\"%")
_PATH_KEEP = "-_.~$&+,/:;=@"


def _valid_port(port):
    return port == "" or (port[0] == ":" and all(c in _DIGITS for c in port[1:]))


def _parse_host(host):
    if host.startswith("["):
        close = host.rfind("]")
        if close < 0:
            raise CelError("missing ']' in host")
        if not _valid_port(host[close + 1 :]):
            raise CelError(f"invalid port {host[close + 1 :]!r} after host")
    else:
        colon = host.rfind(":")
        if colon != -1 and not _valid_port(host[colon:]):
            raise CelError(f"invalid port {host[colon:]!r} after host")
    if not set(host) <= _HOST_OK and any(ord(c) < 0x80 for c in set(host) - _HOST_OK):
        raise CelError(f"invalid character in host name {host!r}")
    return urllib.parse.unquote(host)


def parse_url(raw, via_request=True):
    """net/url parse(rawURL, viaRequest) for what the CEL library reads; raises CelError like Go's errors."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        raise CelError("net/url: invalid control character in URL")
    if raw == "" and via_request:
        raise CelError("empty url")
    url = URL()
    if raw == "*":
        url.path = "*"
        return url
    rest = raw
    for index, char in enumerate(raw):
        if char == ":":
            if index == 0:
                raise CelError("missing protocol scheme")
            url.scheme, rest = raw[:index].lower(), raw[index + 1 :]
            break
        if (index == 0 and not char.isascii()) or (index == 0 and not char.isalpha()) or char not in _SCHEME_REST:
            break
    if rest.endswith("?") and rest.count("?") == 1:
        rest = rest[:-1]
    else:
        rest, _sep, url.raw_query = rest.partition("?")
    if not rest.startswith("/"):
        if url.scheme:
            url.opaque = rest
            return url
        if via_request:
            raise CelError("invalid URI for request")
        if ":" in rest.split("/", 1)[0]:
            raise CelError("first path segment in URL cannot contain colon")
    if (url.scheme or not via_request and not rest.startswith("///")) and rest.startswith("//"):
        authority, slash, tail = rest[2:].partition("/")
        rest = slash + tail
        userinfo, at, host = authority.rpartition("@")
        url.user = userinfo if at else None
        url.host = _parse_host(host)
    if re.search(r"%(?![0-9A-Fa-f]{2})", rest):
        raise CelError("invalid URL escape")
    url.path = urllib.parse.unquote(rest)
    url.raw_path = rest
    return url


class URL:
    def __init__(self):
        self.scheme = self.opaque = self.host = self.path = self.raw_path = self.raw_query = ""
        self.user = None

    def key(self):
        return (self.scheme, self.opaque, self.user, self.host, self.escaped_path(), self.raw_query)

    def __eq__(self, other):
        return isinstance(other, URL) and other.key() == self.key()

    def __hash__(self):
        return hash(self.key())

    def split_host_port(self):
        host, port = self.host, ""
        colon = host.rfind(":")
        if colon != -1 and _valid_port(host[colon:]):
            host, port = host[:colon], host[colon + 1 :]
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        return host, port

    def escaped_path(self):
        """URL.EscapedPath: RawPath when it is a valid encoding of Path, else Path escaped."""
        escaped = urllib.parse.quote(self.path, safe=_PATH_KEEP)
        if (
            self.raw_path != escaped
            and _valid_encoded(self.raw_path)
            and urllib.parse.unquote(self.raw_path) == self.path
        ):
            return self.raw_path
        if self.path == "*":
            return "*"
        return escaped

    def query(self):
        """URL.Query (ParseQuery, malformed pairs dropped): {key: [values]}."""
        found = {}
        for pair in self.raw_query.split("&"):
            if not pair or ";" in pair:
                continue
            key, _sep, value = pair.partition("=")
            try:
                key, value = _query_unescape(key), _query_unescape(value)
            except ValueError:
                continue
            found.setdefault(key, []).append(value)
        return found


def _valid_encoded(raw):
    return all(c in "!$&'()*+,;=:@[]%-_.~/" or (c.isascii() and c.isalnum()) for c in raw)


def _query_unescape(text):
    if re.search(r"%(?![0-9A-Fa-f]{2})", text):
        raise ValueError(text)
    return urllib.parse.unquote_plus(text)

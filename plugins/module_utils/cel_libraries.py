# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Kubernetes' CEL libraries that krops registers with the engine in pure Python: quantity, URL, and IP/CIDR
(module_utils/cel.py assembles them into its EXTENSIONS). Each value type travels through the engine as a
map with one private key, so equal values are equal maps.
"""

from __future__ import annotations

import decimal
import ipaddress
import re
import urllib.parse


# --- Kubernetes quantity library -------------------------------------------------------------
# A Quantity travels through the engine as a map {_QTY: canonical decimal}: equal values are
# equal maps, as Quantity equality compares values. Grammar of k8s.io/apimachinery resource.Quantity:
# <sign><digits>[.<digits>]<suffix>, suffix binary (Ki..Ei), decimal (n u m "" k M G T P E) or e<int>.
_QTY = "__krops_quantity__"
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def _parse_quantity(text):
    match = _QUANTITY.match(text) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"invalid quantity {text!r}")
    number, suffix = decimal.Decimal(match.group(1)), match.group(2) or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number.scaleb(_DECIMAL[suffix])
    return number.scaleb(int(suffix[1:])) if suffix else number


def _quantity_value(value):
    if isinstance(value, dict) and _QTY in value:
        return decimal.Decimal(value[_QTY])
    if isinstance(value, int) and not isinstance(value, bool):
        return decimal.Decimal(value)
    raise TypeError(f"not a quantity: {value!r}")


def _quantity_of(number):
    return {_QTY: str(number.normalize())}


def _is_quantity(text):
    try:
        _parse_quantity(text)
    except ValueError:
        return False
    return True


def _quantity_compare(a, b):
    left, right = _quantity_value(a), _quantity_value(b)
    return (left > right) - (left < right)


def _as_integer(q):
    value = _quantity_value(q)
    if value != value.to_integral_value() or abs(value) >= 2**63:
        raise ValueError("cannot convert value to integer")
    return int(value)


QUANTITY_FUNCTIONS = {
    "quantity": lambda text: _quantity_of(_parse_quantity(text)),
    "isQuantity": _is_quantity,
    "sign": lambda q: _quantity_compare(q, 0),
    "isGreaterThan": lambda a, b: _quantity_compare(a, b) > 0,
    "isLessThan": lambda a, b: _quantity_compare(a, b) < 0,
    "compareTo": _quantity_compare,
    "add": lambda a, b: _quantity_of(_quantity_value(a) + _quantity_value(b)),
    "sub": lambda a, b: _quantity_of(_quantity_value(a) - _quantity_value(b)),
    "isInteger": lambda q: (
        _quantity_value(q) == _quantity_value(q).to_integral_value() and abs(_quantity_value(q)) < 2**63
    ),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda q: float(_quantity_value(q)),
}


# --- Kubernetes URL library -------------------------------------------------------------------
# url() accepts what Go's url.ParseRequestURI accepts: an absolute URI or an absolute path, no
# control characters, a host of URL characters and a numeric port. A URL travels as {_URL: text}.
_URL = "__krops_url__"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~!$&'()*+,;=%-]*)(:[0-9]*)?$")


def parse_url(text):
    if not isinstance(text, str) or not text or any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise ValueError(f"URL {text!r} is not valid")
    if not _SCHEME.match(text) and not text.startswith("/"):
        raise ValueError(f"URL {text!r} is not absolute")
    parts = urllib.parse.urlsplit(text, allow_fragments=False)
    if parts.netloc:
        host = parts.netloc.rpartition("@")[2]
        if not _HOST.match(host):
            raise ValueError(f"URL {text!r} has an invalid host")
    return parts


def _url(text):
    parse_url(text)
    return {_URL: text}


def _url_parts(value):
    """The URL as url.Parse splits it: the fragment apart (url() checked it as ParseRequestURI does)."""
    if isinstance(value, dict) and _URL in value:
        return urllib.parse.urlsplit(value[_URL])
    raise TypeError(f"not a URL: {value!r}")


def _escaped_path(value):
    """URL.EscapedPath: the path as written when it is a valid encoding, else the path escaped as Go does."""
    raw = _url_parts(value).path
    if all(c in "!$&'()*+,;=:@[]%-_.~/" or (c.isascii() and c.isalnum()) for c in raw):
        return raw
    return urllib.parse.quote(urllib.parse.unquote(raw), safe="-_.~$&+,/:;=@")


def _host(value):
    parts = _url_parts(value)
    return parts.netloc.rpartition("@")[2]


def _hostname(value):
    host = _host(value)
    if host.startswith("["):
        return host[1 : host.index("]")]
    return host.rpartition(":")[0] if ":" in host else host


def _port(value):
    host = _host(value)
    tail = host[host.index("]") + 1 :] if host.startswith("[") else host
    return tail.rpartition(":")[2] if ":" in tail else ""


def _query(value):
    result = {}
    for key, item in urllib.parse.parse_qsl(_url_parts(value).query, keep_blank_values=True):
        result.setdefault(key, []).append(item)
    return result


def _is_url(text):
    try:
        parse_url(text)
    except ValueError:
        return False
    return True


URL_FUNCTIONS = {
    "url": _url,
    "isURL": _is_url,
    "getScheme": lambda u: _url_parts(u).scheme,
    "getHost": _host,
    "getHostname": _hostname,
    "getPort": _port,
    "getEscapedPath": _escaped_path,
    "getQuery": _query,
}


# --- Kubernetes IP and CIDR library (isIP, isCIDR) -------------------------------------------
# k8s.io/apiserver pkg/cel/library/ip.go and cidr.go: an IPv4 or IPv6 address (a prefix for
# isCIDR); IPv4-mapped IPv6 addresses, zones and leading zeros are not valid. ip() and cidr()
# objects are not modelled, so rules that use them stay unevaluable.
def _address(text):
    if not isinstance(text, str) or "%" in text:
        raise ValueError(text)
    address = ipaddress.ip_address(text)  # refuses leading zeros in IPv4 octets
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise ValueError(text)
    return address


def _is_ip(text):
    try:
        _address(text)
    except ValueError:
        return False
    return True


def _is_cidr(text):
    if not isinstance(text, str) or text.count("/") != 1:
        return False
    address, bits = text.split("/")
    if not bits.isdigit() or not bits.isascii() or (len(bits) > 1 and bits[0] == "0"):
        return False
    try:
        return int(bits) <= _address(address).max_prefixlen
    except ValueError:
        return False


IP_FUNCTIONS = {"isIP": _is_ip, "isCIDR": _is_cidr}

# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The validators behind the Kubernetes CEL format library (``format.<name>().validate(s)``), for cel.py.

As k8s.io/apiserver v0.34.10 pkg/cel/library/format.go builds them: the name formats are k8s.io/apimachinery
v0.34.10 validation (pkg/util/validation IsDNS1123Label, IsDNS1123Subdomain, IsDNS1035Label, IsQualifiedName,
IsValidLabelValue; pkg/api/validation maskTrailingDash for the *Prefix forms), with their messages
(RegexError, MaxLenError, EmptyError); uuid, byte, date and datetime are kube-openapi strfmt (UUIDPattern,
govalidator's Base64 pattern, time.Parse("2006-01-02"), IsDateTime); uri is url.ParseRequestURI.

Importable without Ansible.
"""

from __future__ import annotations

import datetime
import re

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
_UUID = re.compile(r"^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$", re.I)
_BASE64 = re.compile(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$")
_TIME = re.compile(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")


def regex_error(msg, fmt, *examples):
    """validation.RegexError."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    return msg + " (e.g. " + " or ".join(f"'{e}', " for e in examples) + f"regex used for validation is '{fmt}')"


def _full(pattern, value):
    return re.fullmatch(pattern, value, re.ASCII) is not None


def _too_long(value, limit):
    return [f"must be no more than {limit} characters"] if len(value) > limit else []


def dns1123_label(value):
    problems = _too_long(value, 63)
    if not _full(_LABEL, value):
        problems.append(
            "must not contain dots"
            if _full(_SUBDOMAIN, value)
            else regex_error(_LABEL_MSG, _LABEL, "my-name", "123-abc")
        )
    return problems


def dns1123_subdomain(value):
    problems = _too_long(value, 253)
    if not _full(_SUBDOMAIN, value):
        problems.append(regex_error(_SUBDOMAIN_MSG, _SUBDOMAIN, "example.com"))
    return problems


def dns1035_label(value):
    problems = _too_long(value, 63)
    if not _full(_DNS1035, value):
        problems.append(regex_error(_DNS1035_MSG, _DNS1035, "my-name", "abc-123"))
    return problems


def qualified_name(value):
    parts = value.split("/")
    if len(parts) > 2:
        return [
            "a qualified name "
            + regex_error(_QNAME_MSG, _QNAME, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    problems = []
    if len(parts) == 2:
        if not parts[0]:
            problems.append("prefix part must be non-empty")
        else:
            problems += ["prefix part " + p for p in dns1123_subdomain(parts[0])]
    name = parts[-1]
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > 63:
        problems.append("name part must be no more than 63 characters")
    if not _full(_QNAME, name):
        problems.append("name part " + regex_error(_QNAME_MSG, _QNAME, "MyName", "my.name", "123-abc"))
    return problems


def label_value(value):
    problems = _too_long(value, 63)
    if not _full("(" + _QNAME + ")?", value):
        problems.append(regex_error(_VALUE_MSG, "(" + _QNAME + ")?", "MyValue", "my_value", "12345"))
    return problems


def mask_trailing_dash(name):
    """pkg/api/validation maskTrailingDash: a generateName prefix may end with '-'."""
    return name[:-2] + "a" if len(name) > 1 and name.endswith("-") else name


def is_date(value):
    """time.Parse("2006-01-02", value)."""
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", value):
        return False
    try:
        datetime.date(int(value[:4]), int(value[5:7]), int(value[8:]))
    except ValueError:
        return False
    return True


def is_datetime(value):
    """strfmt.IsDateTime: a date, 't', then HH:MM:SS[.frac](z|±hh:mm), each field only bounded above."""
    if len(value) < 4:
        return False
    parts = value.lower().split("t")
    if len(parts) < 2 or not is_date(parts[0]):
        return False
    found = _TIME.match(parts[1])
    return bool(found) and found.group(1) <= "23" and found.group(2) <= "59" and found.group(3) <= "59"


def validators(parse_request_uri):
    """{format name: value -> [messages]}; ``parse_request_uri`` raises ValueError(Go's message) on a bad URI."""

    def uri(value):
        try:
            parse_request_uri(value)
        except ValueError as exc:
            return [f'parse "{value}": {exc}']
        return []

    return {
        "dns1123Label": dns1123_label,
        "dns1123Subdomain": dns1123_subdomain,
        "dns1035Label": dns1035_label,
        "qualifiedName": qualified_name,
        "dns1123LabelPrefix": lambda v: dns1123_label(mask_trailing_dash(v)),
        "dns1123SubdomainPrefix": lambda v: dns1123_subdomain(mask_trailing_dash(v)),
        "dns1035LabelPrefix": lambda v: dns1035_label(mask_trailing_dash(v)),
        "labelValue": label_value,
        "uri": uri,
        "uuid": lambda v: [] if _UUID.match(v) else ["does not match the UUID format"],
        "byte": lambda v: [] if _BASE64.match(v) else ["invalid base64"],
        "date": lambda v: [] if is_date(v) else ["invalid date"],
        "datetime": lambda v: [] if is_datetime(v) else ["invalid datetime"],
    }

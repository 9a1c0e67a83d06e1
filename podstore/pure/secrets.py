"""Passwords never shown: masking database URLs in anything podstore prints or logs.

One rule for the whole package: a URL's password (user part or ``password=`` query) becomes
``***``, and text that may echo it (a driver's error message) has it removed wherever it appears.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit

_USERINFO_PASSWORD = re.compile(r"(://[^:/@?#\s]*:)[^@/?#\s]*(@)")
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#\s]*", re.IGNORECASE)


def mask_url(text: str) -> str:
    """``text`` (a URL, or a message holding URLs) with every URL password replaced by ***."""
    text = _USERINFO_PASSWORD.sub(r"\1***\2", text)
    return _QUERY_PASSWORD.sub(r"\1***", text)


def url_password(url: str) -> str | None:
    """The password a URL carries (user part first, else a ``password=`` query), or None."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return None
    if password:
        return unquote(password)
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key.lower() == "password" and value:
            return value
    return None


def scrub(text: str, password: str | None) -> str:
    """``text`` with URLs masked and ``password`` removed wherever else it appears."""
    text = mask_url(text)
    if password:
        text = text.replace(password, "***")
    return text

"""CDI annotations as kubelet 1.28–1.31 generated them for device-plugin CDI devices.

kubelet passed the container's sorted CDI device names through the CDI library's annotation
helper under the plugin name ``devicemanager``. Any validation failure meant no annotation at
all (the devices still reach the runtime through the CRI field). Upstream's vendor and class
validators slice their middle characters without a length check and panic on one-character
names; here such names are judged by the first- and last-character rules only.
"""

from __future__ import annotations

import logging

log = logging.getLogger("podstore")

ANNOTATION_PREFIX = "cdi.k8s.io/"
PLUGIN_NAME = "devicemanager"
MAX_NAME_LENGTH = 63


def _letter(c: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z")


def _alnum(c: str) -> bool:
    return _letter(c) or ("0" <= c <= "9")


def _check(value: str, what: str, first: str, middle: str, first_is_letter: bool) -> str | None:
    """Common shape of the CDI name rules: a first, a middle and a last character class."""
    if not value:
        return f"empty {what}"
    if not (_letter(value[0]) if first_is_letter else _alnum(value[0])):
        return f"{what} {value!r} should start with {first}"
    for c in value[1:-1]:
        if not (_alnum(c) or c in middle):
            return f"{what} {value!r}: invalid character {c!r}"
    if len(value) > 1 and not _alnum(value[-1]):
        return f"{what} {value!r} should end with a letter or digit"
    return None


def device_name_error(qualified: str) -> str | None:
    """Why ``qualified`` is not a ``vendor/class=name`` CDI device name, or None."""
    if not qualified or qualified.startswith("/"):
        return f"unqualified device {qualified!r}"
    kind, sep, name = qualified.partition("=")
    if not sep or not kind or not name:
        return f"unqualified device {qualified!r}, missing device name"
    vendor, sep, klass = kind.partition("/")
    if not sep or not vendor or not klass:
        return f"invalid device kind {kind!r}"
    return (
        _check(vendor, "vendor", "a letter", "_-.", first_is_letter=True)
        or _check(klass, "class", "a letter", "_-", first_is_letter=True)
        or _check(name, "device name", "a letter or digit", "_-.:", first_is_letter=False)
    )


def annotation_name_error(name: str) -> str | None:
    if len(name) > MAX_NAME_LENGTH:
        return f"annotation name {name!r} is longer than {MAX_NAME_LENGTH} characters"
    return _check(name, "annotation name", "a letter or digit", "_-.", first_is_letter=False)


def generate_annotations(
    pod_uid: str, container_name: str, devices: list[str]
) -> list[tuple[str, str]]:
    """The (key, value) CDI annotations for one container; [] when none or on any error."""
    if not devices:
        return []
    names = sorted(devices)
    resource_id = f"{pod_uid}-{container_name}"
    name = (PLUGIN_NAME + "_" + resource_id).replace("/", "_")
    problem = annotation_name_error(name)
    for device in names:
        problem = problem or device_name_error(device)
    if problem is not None:
        log.warning("Failed to create CDI annotations for %s: %s", resource_id, problem)
        return []
    return [(ANNOTATION_PREFIX + name, ",".join(names))]

# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_config's logic: SGLang server options -> the ``--config`` YAML file, secrets kept out of sight.

Private to the collection: not a public API, may change without notice.

SGLang 0.5.23 reads ``--config FILE.yaml`` by turning each key, as written, into ``--<key>``
(``ConfigArgumentMerger._convert_config_to_args`` and ``_add_scalar_arg`` in SGLang's
``sglang/srt/utils/server_args_config_parser.py``) and parsing the result with the server's
argparse parser, which knows only the dash form: ``tp_size`` becomes ``--tp_size`` and is rejected,
``tp-size`` is accepted. Inventories are written with underscores as often as with dashes, so keys
are normalised here, and two spellings of one option are an error rather than a silent pick.

The file is written as ``key: <JSON value>`` lines: JSON scalars, lists and objects are YAML flow
values, so no YAML library is needed on the host and the output is byte-stable for the same
options (keys sorted), which is what makes "changed" mean "the server would start differently".
"""

from __future__ import annotations

import grp
import json
import math
import os
import pwd
import re
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._common import secrets as _secrets
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.plugins.module_utils._common.files import atomic_write
from ansible_collections.gpufleet.llm.plugins.module_utils._common.secrets import MASK

# Option names whose values are secrets (api-key, admin-api-key, ssl-keyfile-password, *-token).
SECRET_KEY = re.compile(r"(api-key|password|passwd|secret|credential|(^|-)token$)")
KEY_SHAPE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
LINE = re.compile(r"^(\s*)([A-Za-z0-9_.-]+)(\s*:\s*)(.*)$")
# format env: systemd EnvironmentFile= lines, NAME="value".
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ENV_LINE = re.compile(r"^(\s*)([A-Za-z_][A-Za-z0-9_]*)(=)(.*)$")
HEADER = "# Managed by gpufleet.llm (sglang role): edits are replaced on the next deploy.\n"


class ConfigError(Exception):
    """Bad options; the message names the option and the fix."""


def is_secret(key):
    return bool(SECRET_KEY.search(str(key).lower()))


def normalise(options, secrets=None):
    """Options and secrets -> {dash-key: value}. None values are dropped (they unset a default)."""
    out = {}
    origin = {}
    for source, data in (("options", options or {}), ("secrets", secrets or {})):
        if not isinstance(data, dict):
            raise ConfigError("%s must be a dict of SGLang option -> value, got %s" % (source, type(data).__name__))
        for raw, value in data.items():
            key = str(raw).strip().lstrip("-").replace("_", "-").lower()
            if not KEY_SHAPE.match(key):
                raise ConfigError("%s: %r is not an SGLang option name (long option without the leading "
                                  "dashes, for example tp-size)" % (source, raw))
            if key in origin:
                raise ConfigError("option %s is given twice (as %r and %r): keep one spelling"
                                  % (key, origin[key], raw))
            origin[key] = raw
            if value is None:
                continue
            if isinstance(value, (dict, list)) and source == "secrets":
                raise ConfigError("secret %s must be a string, not a %s" % (key, type(value).__name__))
            if isinstance(value, float) and math.isnan(value):
                raise ConfigError("option %s is NaN" % key)
            out[key] = value
    return out


def normalise_env(options, secrets=None):
    """Environment variables and secret ones -> {NAME: text}; names are kept as given (case matters)."""
    out = {}
    for source, data in (("options", options or {}), ("secrets", secrets or {})):
        if not isinstance(data, dict):
            raise ConfigError("%s must be a dict of environment variable -> value, got %s" % (source, type(data).__name__))
        for raw, value in data.items():
            name = str(raw)
            if not ENV_NAME.match(name):
                raise ConfigError("%s: %r is not an environment variable name (letters, digits and _, "
                                  "not starting with a digit)" % (source, name))
            if name in out:
                raise ConfigError("environment variable %s is given twice: keep one" % name)
            if value is None:
                continue
            if isinstance(value, (dict, list)):
                raise ConfigError("environment variable %s must be a string or a number, not a %s"
                                  % (name, type(value).__name__))
            text = str(value)
            if "\n" in text or "\r" in text or "\0" in text:
                raise ConfigError("environment variable %s contains a line break or NUL, which an "
                                  "EnvironmentFile cannot hold: remove it" % name)
            out[name] = text
    return out


def render_env(variables):
    """The environment file's text: a header, then ``NAME="value"`` per variable, names sorted."""
    lines = [HEADER]
    for name in sorted(variables):
        value = variables[name].replace("\\", "\\\\").replace('"', '\\"')
        lines.append('%s="%s"\n' % (name, value))
    return "".join(lines)


def render(options):
    """The file's text: a header, then ``key: <JSON>`` per option, keys sorted."""
    lines = [HEADER]
    for key in sorted(options):
        try:
            value = json.dumps(options[key], sort_keys=True, ensure_ascii=True)
        except (TypeError, ValueError) as exc:
            raise ConfigError("option %s: value cannot be written to YAML (%s)" % (key, exc))
        lines.append("%s: %s\n" % (key, value))
    return "".join(lines)


def mask_text(text, secret_values=(), line_shape=LINE):
    """Text with the values of secret-looking keys, and any given secret value, replaced by MASK."""
    out = []
    for line in text.splitlines(True):
        m = line_shape.match(line)
        if m and is_secret(m.group(2).replace("_", "-")) and m.group(4).strip() not in ("", "null", "~"):
            line = "%s%s%s%s\n" % (m.group(1), m.group(2), m.group(3), json.dumps(MASK))
        out.append(line)
    return _secrets.mask("".join(out), *(str(value) for value in secret_values if value))


def masked_options(options):
    return dict((k, MASK if is_secret(str(k).replace("_", "-")) else v) for k, v in options.items())


def read_text(path):
    try:
        with open(path, "r") as handle:
            return handle.read()
    except (IOError, OSError) as exc:
        if getattr(exc, "errno", None) == 2:
            return None
        raise ConfigError("cannot read %s: %s" % (path, exc))


def keep_previous(path, previous):
    """Copy the current file beside it (mode and owner kept) before it is replaced."""
    st = os.stat(path)
    with open(path, "rb") as handle:
        content = handle.read()
    atomic_write(previous, content, st.st_mode & 0o7777, uid=st.st_uid, gid=st.st_gid)


# --- the module: its options and what one run does ----------------------------------------------------

def argument_spec() -> dict[str, dict[str, Any]]:
    """sglang_config's options, the one place their types and defaults are written."""
    return dict(
        path=dict(type="path", required=True),
        options=dict(type="dict", default={}),
        secrets=dict(type="dict", default={}, no_log=True),
        owner=dict(type="str"),
        group=dict(type="str"),
        mode=dict(type="raw", default="0640"),
        previous=dict(type="path"),
        format=dict(type="str", choices=["yaml", "env"], default="yaml"),
    )


def secret_option_values(params: dict[str, Any]) -> list[str]:
    """Values of secret-looking names given in ``options``: the module keeps them out of every output."""
    options = params.get("options") or {}
    if not isinstance(options, dict):
        return []
    return [str(v) for k, v in options.items() if v not in (None, "") and is_secret(str(k).replace("_", "-"))]


def file_mode(mode: int | str) -> int:
    """The ``mode`` option as an int: octal text such as ``0640``, or an int as YAML gave it."""
    if isinstance(mode, int):
        return mode
    try:
        return int(str(mode), 8)
    except ValueError:
        raise ModuleFailure("mode must be octal like 0640, got %r" % mode)


def owner_ids(owner: str | None, group: str | None, *, check_mode: bool = False) -> tuple[int, int]:
    """(uid, gid) of the owner and group options; -1 leaves that one as it is.

    In check mode a missing user or group is not an error: on a host that never ran the role, the
    tasks before this one would have created them, and check mode created nothing.
    """
    uid = gid = -1
    try:
        if owner:
            uid = int(owner) if owner.isdigit() else pwd.getpwnam(owner).pw_uid
        if group:
            gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        if check_mode:
            return -1, -1
        raise ModuleFailure("owner %r or group %r does not exist on this host: create the service user first"
                            % (owner, group))
    return uid, gid


def _check_path(path: str, *, fmt: str, check_mode: bool) -> bool:
    """Whether the file's directory exists; a missing one is an error outside check mode."""
    if fmt == "yaml" and not path.endswith((".yaml", ".yml")):
        raise ModuleFailure("path %s must end in .yaml or .yml: SGLang reads --config files by suffix" % path)
    if os.path.isdir(os.path.dirname(path) or "."):
        return True
    if check_mode:
        # A first deploy in check mode: the directory would be created by an earlier task.
        return False
    raise ModuleFailure("the directory of %s does not exist: create it first" % path)


def _render(params: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The normalised options and the file's text, in the file's format."""
    if params["format"] == "env":
        variables = normalise_env(params["options"], params["secrets"])
        return variables, render_env(variables)
    options = normalise(params["options"], params["secrets"])
    return options, render(options)


def run(params: dict[str, Any], *, check_mode: bool) -> dict[str, Any]:
    """Render the options and replace the file when its bytes differ; the module's result.

    ``changed`` False means the bytes are the same: the file's mode and owner are then the
    module's to set (Ansible's file attribute handling), not this function's.
    """
    path = params["path"]
    fmt = params.get("format") or "yaml"
    params = dict(params, format=fmt)
    directory_exists = _check_path(path, fmt=fmt, check_mode=check_mode)
    mode = file_mode(params["mode"])
    secret_values = [str(v) for v in (params["secrets"] or {}).values() if v not in (None, "")]
    try:
        options, text = _render(params)
        before = read_text(path) if directory_exists else None
    except ConfigError as exc:
        raise ModuleFailure(str(exc))
    uid, gid = owner_ids(params["owner"], params["group"], check_mode=check_mode)
    result = dict(changed=False, path=path, options=masked_options(options))
    if before == text:
        return result
    result["changed"] = True
    shape = ENV_LINE if fmt == "env" else LINE
    result["diff"] = dict(before_header=path, after_header=path,
                          before=mask_text(before or "", secret_values, line_shape=shape),
                          after=mask_text(text, secret_values, line_shape=shape))
    if check_mode:
        return result
    try:
        if before is not None and params["previous"]:
            keep_previous(path, params["previous"])
            result["previous"] = params["previous"]
        atomic_write(path, text, mode, uid=uid, gid=gid)
    except (IOError, OSError) as exc:
        raise ModuleFailure("cannot write %s: %s" % (path, exc), **result)
    return result

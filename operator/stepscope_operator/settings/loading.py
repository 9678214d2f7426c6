"""Settings from a mounted YAML file overlaid with environment variables; errors name both."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from stepscope_operator.settings.model import OperatorSettings
from stepscope_operator.settings.variables import CONFIG_FILE_ENV, ENV, SettingsError


def load_settings(
    environ: Mapping[str, str] | None = None, config_file: Path | None = None
) -> OperatorSettings:
    """Read settings from a YAML file (optional) overlaid with environment variables."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    path = config_file or (Path(environ[CONFIG_FILE_ENV]) if environ.get(CONFIG_FILE_ENV) else None)
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise SettingsError(f"{CONFIG_FILE_ENV}={path} cannot be read: {exc}") from exc
        if not isinstance(loaded, dict):
            raise SettingsError(f"{path} must hold a mapping of setting names to values")
        values.update(loaded)
    for field, variable in ENV.items():
        if variable in environ:
            values[field] = environ[variable]
    try:
        return OperatorSettings.model_validate(values)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else "settings"
            source = ENV.get(field, field)
            problems.append(f"{source}: {error['msg']}")
        raise SettingsError("invalid operator settings: " + "; ".join(problems)) from exc

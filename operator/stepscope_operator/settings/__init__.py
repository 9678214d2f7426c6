"""The operator's settings: one typed home, read from the environment or a mounted file.

Every setting is a field of `model.OperatorSettings` with its unit, default and
the reason for the default. The environment variable that sets it is a constant
in `variables.ENV`, so a grep for the variable name lands there. A mounted YAML file (path in
`STEPSCOPE_OPERATOR_CONFIG`) may hold the same fields by their Python names;
environment variables win over the file, so a chart can ship a file and a user
can still override one value with `--set env`.

Modules: `model` (the fields, each with its unit, default and reason, and the checks across
them), `variables` (field -> environment variable, and the error that names it), `loading`
(file and environment into a model), `durations` (the operator's duration grammar). Imports
only the core's API models and `agents.signing`.
"""

from stepscope_operator.settings.durations import (
    DurationTooLong,
    parse_duration,
    session_retention,
)
from stepscope_operator.settings.loading import load_settings
from stepscope_operator.settings.model import (
    DEFAULT_ANALYSIS_JOB_RESOURCES,
    DEFAULT_METRICS_PORT,
    OperatorSettings,
)
from stepscope_operator.settings.variables import CONFIG_FILE_ENV, ENV, SettingsError

__all__ = [
    "CONFIG_FILE_ENV",
    "DEFAULT_ANALYSIS_JOB_RESOURCES",
    "DEFAULT_METRICS_PORT",
    "ENV",
    "DurationTooLong",
    "OperatorSettings",
    "SettingsError",
    "load_settings",
    "parse_duration",
    "session_retention",
]

"""The error type for bad configs and inputs: entry points print it as one line, no traceback."""


class ConfigError(ValueError):
  """A user-fixable problem; the message names the field and the fix."""

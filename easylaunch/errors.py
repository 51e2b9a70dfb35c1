"""Errors easylaunch raises; every message names the problem and the fix."""


class EasyLaunchError(Exception):
    """Base class of easylaunch's own errors."""


class SettingsError(EasyLaunchError, ValueError):
    """A settings file or value is missing, unreadable or of the wrong type."""


class LaunchError(EasyLaunchError, ValueError):
    """A launch request is invalid; nothing was started."""


class JobFailedError(EasyLaunchError):
    """The function of a run failed; the message holds the run's traceback."""


class JobCancelledError(EasyLaunchError):
    """The run was cancelled before it produced a result."""


class NotSubmittedError(EasyLaunchError):
    """The run was written to a batch nobody has submitted: waiting for it would never end."""

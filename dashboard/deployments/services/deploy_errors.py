"""Why a deploy cannot even be attempted (deployments.services.deploy re-exports them): nothing was written."""

from __future__ import annotations


class DeployError(Exception):
    """A deploy that cannot even be attempted; the message says why. Nothing was written."""


class SliceNotFound(DeployError):
    pass


class SliceNotFree(DeployError):
    pass


class SliceBusy(DeployError):
    """Another deploy of this slice is in flight."""


class SliceChanged(DeployError):
    """The slice was re-carved (removed or resized) while the grid was being read."""


__all__ = ["DeployError", "SliceBusy", "SliceChanged", "SliceNotFound", "SliceNotFree"]

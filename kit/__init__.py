"""the kit: reproducible SGLang serving on NVIDIA Blackwell workstations.

The public surface is small; everything else is private to its folder.
"""

from kit.errors import CheckFailed, EnvironmentProblem, ExitCode, InputError, KitError

__all__ = ["CheckFailed", "EnvironmentProblem", "ExitCode", "InputError", "KitError"]
__version__ = "0.1.0"

"""Start-up supervision: start a server container, follow its phases live, end with a verdict.

limits_from_spec(spec)   the profile's deadlines and stall windows as tracker limits (pure; it lives
                         in kit/logs/limits.py beside PhaseLimits, re-exported here for the callers)
Watcher                  log lines + activity samples -> tracker, one step at a time
run_up / run_watch       the whole `kit up` / `kit watch` flow, returning an UpResult
"""

from kit.logs.limits import limits_from_spec, parse_limit_overrides
from kit.startup.result import UpResult
from kit.startup.up import run_up, run_watch
from kit.startup.watch import Progress, Watcher

__all__ = [
    "Progress",
    "UpResult",
    "Watcher",
    "limits_from_spec",
    "parse_limit_overrides",
    "run_up",
    "run_watch",
]

"""Which skips CI accepts (tests/conftest.py applies it; tests/test_ci_skips.py holds it): CI installs
and starts the engine, builds the rehearsal image and installs the tests' CPU torch (scripts/test), so
a skip there means the set-up broke; what CI cannot have is a GPU."""

from __future__ import annotations

import re

# The skips CI accepts, each with why; a reason must match one from its start. Short on purpose.
ALLOWED_SKIPS = {
    r"no NVIDIA GPU\b": "CI has no GPU; the gpu tests run on the GPU workflows (docs/ci.md)",
    r"(peer traffic needs two GPUs|one GPU: nothing to peer with)": "a peer test on a one-GPU runner",
    r"the GPU image is built here": "a GPU runner has no unbuilt image to test the refusal with",
}


def allowed_skip(reason: str) -> str | None:
    """Why CI accepts a skip with REASON, or None (then it fails there)."""
    reason = reason.removeprefix("Skipped: ")
    return next((why for pattern, why in ALLOWED_SKIPS.items() if re.match(pattern, reason)), None)

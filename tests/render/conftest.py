from __future__ import annotations

import sys
from pathlib import Path

# catalog_helpers (scratch catalogs, the CLI in-process) lives beside the catalog tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "catalog"))

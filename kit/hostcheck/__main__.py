"""`python -m kit.hostcheck STEP --out OUT --work WORK`: one step of the GPU host check."""

import sys

from kit.hostcheck.runner import main

sys.exit(main())

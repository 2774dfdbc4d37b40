"""``python -m hpc_refer.run``: :func:`hpc_refer.run.main.main`."""

import sys

from hpc_refer.run.main import main

sys.exit(main())

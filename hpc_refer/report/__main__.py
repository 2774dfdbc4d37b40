"""``python -m hpc_refer.report``: :func:`hpc_refer.report.build.main`."""

import sys

from hpc_refer.report.build import main

sys.exit(main())

"""``python -m hpc_refer.plot RUN_DIR ... --out curves.png``: learning curves as in the paper,
mean over seeds with the 20-80 % band (:func:`hpc_refer.report.curves.main`, where the curves
are drawn)."""

import sys

if __name__ == "__main__":
    from hpc_refer.report.curves import main

    sys.exit(main())

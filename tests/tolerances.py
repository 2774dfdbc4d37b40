"""How closely two different computations of the same numbers must agree.

Two implementations of one formula (the numpy and the torch forward of a network, the compiled
and the eager step, a numba kernel and its numpy reference, a sum taken in another order or
over arrays of another width) round differently: they reorder sums, fuse multiply-adds or use
other vector widths, and which of these a library does depends on the CPU (torch picks its
kernels at run time, ``ATEN_CPU_CAPABILITY``; numba compiles for the host, ``NUMBA_CPU_NAME``).
Such comparisons use these tolerances, tied to the precision of the numbers compared; exact
equality stays for results that one code path computes on both sides (determinism, restart bit
for bit, same-seed runs, identical weights across learners). ``make test-portable`` runs the
suite with other torch kernels and a generic numba target to show that the split holds.
"""

from __future__ import annotations

#: float32 results of a few layers or a recursion over float32 rows: each value is a sum of at
#: most a few hundred rounded terms (float32 eps = 1.2e-7).
F32 = {"rtol": 1e-5, "atol": 1e-6}

#: float64 results of a different order of the same operations (sums over lanes, ranks or
#: algorithms that coincide algebraically): far above float64 round-off (eps = 2.2e-16), far
#: below any change of the maths.
F64 = {"rtol": 1e-12, "atol": 1e-14}

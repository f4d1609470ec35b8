"""What this machine really has: CuPy/CUDA/cuDNN and NumPy's BLAS/OpenMP.

Every query is lazy (nothing is imported until it is asked), never raises, and
answers ``False``/``None`` on a machine with no GPU, no driver and no CuPy.

Every answer is cached after the first call, so asking on every request costs about 0.1 us:
the CUDA answers until the ``cupy`` entry of ``sys.modules`` changes (CuPy imported, by the query
or by anyone), the CPU answers until a new module is imported, and every answer until the
process forks (the child asks again). ``cuda.py`` and ``cpu.py`` say more.
"""

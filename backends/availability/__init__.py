"""What this machine really has: CuPy/CUDA/cuDNN and NumPy's BLAS/OpenMP.

Every query is lazy (nothing is imported until it is asked), never raises, and
answers ``False``/``None`` on a machine with no GPU, no driver and no CuPy.
"""

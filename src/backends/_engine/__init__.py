"""The engine: the flag table (``table``), where values live (``state``), scopes
(``scope``) and the namespaces derived from the table (``namespace``).

Nothing here knows CuPy, NumPy or any integration: those build on the engine.
"""

from .accelerator import ACCELERATED as ACCELERATED

"""A Starlette inference server whose requests each run under their own backends flags."""

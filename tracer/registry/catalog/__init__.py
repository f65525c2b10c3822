"""The stage catalog: one module a phase, named by the phase's id (``registry/stages.py`` loads them in order)."""

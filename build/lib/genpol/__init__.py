"""genpol: generative policies for continuous control.

Python API: ``from genpol.api import train, evaluate, load_policy``.
Command line: ``python -m genpol.train ...`` and ``python -m genpol.evaluate ...``.
(The API lives in ``genpol.api`` because ``genpol.train`` and ``genpol.evaluate`` are the
command-line modules.)
"""

__version__ = "0.1.0"

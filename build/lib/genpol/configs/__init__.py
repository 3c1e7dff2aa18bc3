"""genpol's Hydra config groups, installed as the package ``genpol.configs``.

The folder stays at the repository's root (the layout users know); the build maps it into genpol's
namespace (``pyproject.toml``), and the entry points read it as ``pkg://genpol.configs``, so the
installed wheel finds its configs from any directory, and a ``configs/`` folder of the user's own is
never taken for genpol's. Add your own groups with Hydra's ``--config-dir`` or search path.
"""

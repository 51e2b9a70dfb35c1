"""easylaunch's Hydra launcher (``hydra/launcher=easylaunch``); Hydra finds it in the
``hydra_plugins`` namespace package (which has no ``__init__.py`` of its own)."""

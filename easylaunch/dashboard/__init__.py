"""The web dashboard, ``easylaunch ui``: a thin view over the registry, run folders and results.

``views`` and ``charts`` are plain functions (no web framework); ``server`` imports Starlette,
uvicorn and Jinja2 (the ``ui`` extra) and is imported only when ``easylaunch ui`` runs.
"""

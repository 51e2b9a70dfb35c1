"""Runs on this machine: in this process (``here_no_doodad``), as subprocesses in its care
(``local``, ``local_docker``, ``local_singularity``: :mod:`.attached`), or under a supervisor of
their own (``detach``: :mod:`.detached`); and what they know of the machine (:mod:`.machine`)."""

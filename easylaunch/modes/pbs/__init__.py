"""The PBS family: ``pbs`` (qsub now; ``mode``), with PBS Pro's commands and their parsing as
pure functions in ``scheduler``. What it shares with the Slurm modes is ``modes.scheduled``."""

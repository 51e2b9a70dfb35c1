"""The Slurm family: ``slurm`` (sbatch now), ``sss`` (Singularity batch folders) and ``htp``
(packed task files). ``scheduler`` holds Slurm's commands and their parsing as pure functions,
``base`` the tracking every Slurm mode shares, ``batch`` what the batch-folder modes share, and
``packer`` htp's job-side task packer. The shell text that starts runs is ``modes.jobscript``."""

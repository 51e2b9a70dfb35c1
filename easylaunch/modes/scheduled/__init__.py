"""Modes that hand runs to a batch scheduler, which they take as a part (a module of
:mod:`easylaunch.modes.schedulers`): :mod:`.tracking` (what they share: preflight, tracking,
cancel), :mod:`.job_arrays` (slurm, slurm_singularity, pbs: job arrays) and :mod:`.batch` (sss,
htp: a batch folder, with :mod:`.sss` or :mod:`.htp` as the way runs are packed into jobs)."""

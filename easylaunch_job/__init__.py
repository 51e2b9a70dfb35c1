"""easylaunch's job side: what runs where runs run, with the standard library and cloudpickle.

Every mode ships this package to its targets as one file, a zipapp (``job.pyz``, built by
:mod:`easylaunch.runs.jobpack` and stored once per content), and starts it the same way:
``python job.pyz run BUNDLE [--log-dir DIR]``. Its other commands are the packer (``pack``,
htp's allocations, ``ssh`` and detached ``local``) and the cloud instance agent (``agent``); the
far side of the SSH transport loads it from memory.

Modules, one concern each:

* ``records``: run-folder file names, atomic writes, ``status.json`` under its lock;
* ``states``: :class:`~easylaunch_job.states.JobState`, shared with the launching side;
* ``environment``: the variables launchers and job scripts set, ranks, processes;
* ``attempts``: a run's attempts across restarts; ``stops``: stop and time-limit signals;
* ``checkpoint`` and ``metrics``: what the run's function calls;
* ``outcome``: result.pkl; ``config``: the DoodadConfig the function receives;
* ``run``: one bundle's function call; ``supervisor``: the job around it, and ``main``;
* ``submission``: the schedulers' submit commands and their job ids (``submit``: submit.sh's);
* ``resubmit``: submitting the next attempt from inside a job;
* ``packer``, ``host_ops``, ``cloud/``: the packer, the SSH far side, the instance agent.

The launching side imports names from here (never the other way), so both sides agree on the
formats by construction. Nothing here imports ``easylaunch``.
"""

# The oldest Python the job side runs on (clusters' and instances' own python3); checked when
# the zipapp starts (__main__) and, for the source, by the test suite (vermin).
PYTHON_FLOOR = (3, 8)


def self_command() -> list:
    """The argv that starts this job side again, e.g. ``[python, /path/job.pyz]`` (add a
    command and its arguments): the zipapp it was started from, else the installed package."""
    import os
    import sys

    archive = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.isfile(archive):
        return [sys.executable, archive]
    return [sys.executable, "-m", "easylaunch_job"]

"""Checkpoints: state a run saves so that its next attempt resumes where it stopped.

A run restarts (up to ``max_restarts`` times) after a time limit, a preemption or spot
interruption, or a lost process; its function then starts again from the top, so it loads what
it saved::

    from easylaunch import checkpoint

    def train(doodad_config, variant):
        state = checkpoint.load(default={"step": 0})
        while state["step"] < variant["steps"]:
            ...  # one step
            state["step"] += 1
            if state["step"] % 100 == 0 or checkpoint.stop_requested():
                checkpoint.save(state)

* ``save(state, name="state")`` pickles ``state`` into the run's checkpoint folder atomically
  (a crash mid-write leaves the previous checkpoint whole). When the run is being stopped, the
  save ends the function right after writing (it raises :class:`Stopped`), and the run restarts
  from that checkpoint.
* ``load(default=None, name="state")`` returns what was saved last, or ``default``.
* ``stop_requested()`` says why the run is being stopped (``"time limit"``, ``"preempted"``),
  None until then. After the notice a function that saves gets CHECKPOINT_GRACE_SECONDS to
  reach its next ``save``; one that never saved stops at once.
* ``folder()`` is the checkpoint folder (``<run folder>/checkpoint``) for files of your own
  (write them to a temporary name and ``os.replace`` them).

These helpers live in the runner, which travels with every run bundle, so they work on machines
where easylaunch is not installed.
"""

from easylaunch_job.checkpoint import Stopped, stop_requested
from easylaunch_job.checkpoint import checkpoint_dir as folder
from easylaunch_job.checkpoint import load_checkpoint as load
from easylaunch_job.checkpoint import save_checkpoint as save

__all__ = ["Stopped", "folder", "load", "save", "stop_requested"]

"""The functions users call: launching (``run_experiment``, ``run_sweep``, ``run_command``)
and resubmitting (``resubmit``, ``resubmit_launch``)."""

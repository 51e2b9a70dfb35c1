"""The cloud family: ``ec2`` and ``gcp``. ``base`` is the path both share (checks, uploads once
per content, tracking from the bucket), ``transfer`` packs runs and writes the boot script, and
the instance agent that runs there is part of the job side (``easylaunch_job.cloud``)."""

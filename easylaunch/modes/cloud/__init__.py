"""The cloud family: ``ec2`` and ``gcp``. ``base`` is the path both share (checks, uploads once
per content, tracking from the bucket), ``transfer`` packs runs and writes the boot script, and
``instance_agent`` is what runs on the instance."""

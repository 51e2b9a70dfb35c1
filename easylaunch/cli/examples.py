"""An example for each command: what ``easylaunch COMMAND --help`` ends with, and what the
command-line reference of the documentation shows (docs/hooks/reference.py reads this table)."""

from __future__ import annotations

import argparse

EXAMPLES: dict[str, str] = {
    "submit": "easylaunch submit --wait -- python train.py --lr 3e-4\n"
              "easylaunch submit --mode slurm --grid lr=1e-3,3e-4 -- python train.py --lr {lr}",
    "ls": "easylaunch ls --exp lr-sweep --state failed --since 2h",
    "status": "easylaunch status 5f69",
    "search": "easylaunch search lr-search-f0721b1d71\n"
              "easylaunch search resume lr-search-f0721b1d71",
    "watch": "nohup easylaunch watch --interval 60 > watch.log 2>&1 &",
    "logs": "easylaunch logs 5f69 -f",
    "cancel": "easylaunch cancel --sweep 5f696763 --yes",
    "resubmit": "easylaunch resubmit --sweep 5f69 --state failed --current-code",
    "resume": "easylaunch resume 5f69 --current-code",
    "forget": "easylaunch forget --exp lr-sweep --state failed --yes",
    "fetch": "easylaunch fetch 5f69",
    "init": "easylaunch init ./easylaunch_config.py",
    "config": "easylaunch config --changed",
    "preview": "easylaunch preview sweep.py slurm",
    "plot": "easylaunch plot lr-sweep --metric loss --by learning_rate",
    "ui": "easylaunch ui --port 0 --open",
    "shell": "easylaunch shell 5f69",
    "interactive": "easylaunch interactive --partition debug --gpus 1 --time 30",
    "doctor": "easylaunch doctor ~/doodad/doodad/easy_launch/config_private.py",
    "pool": "easylaunch pool start quick --workers 4 --preload torch --idle 20m",
    "pool start": "easylaunch pool start quick --workers 4 --preload torch --idle 20m",
    "pool ls": "easylaunch pool ls",
    "pool stop": "easylaunch pool stop quick",
    "dist": "easylaunch dist launch -- python train.py",
    "dist info": "easylaunch dist info",
    "dist launch-cmd": "easylaunch dist launch-cmd -- python train.py",
    "dist launch": "easylaunch dist launch --procs-per-host 4 -- python train.py",
}

_HEAD = "example:\n"


def epilog(command: str) -> str:
    """The end of ``easylaunch COMMAND --help``: the command's example."""
    return _HEAD + "\n".join("  " + line for line in EXAMPLES[command].splitlines())


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help, the description wrapped as usual and the example kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(_HEAD):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)

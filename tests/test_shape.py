"""The code's shape that a reader relies on: every mode name resolves to its class, in the
family folder its name says."""

import pytest

from easylaunch.modes import MODES, get_mode

FAMILIES = {"local": "local", "here_no_doodad": "local", "slurm": "scheduled",
            "sss": "scheduled", "htp": "scheduled", "pbs": "scheduled", "ssh": "ssh",
            "ec2": "cloud", "gcp": "cloud", "azure": "cloud", "aml": "cloud", "ray": "cloud"}


@pytest.mark.parametrize("name", sorted(MODES))
def test_every_mode_name_resolves_in_its_family(name):
    kind = get_mode(name)
    assert kind.name == name
    assert callable(kind.create)
    family = FAMILIES.get(name) or FAMILIES[name.split("_")[0]]  # (local_docker: local)
    assert MODES[name].startswith(f"easylaunch.modes.{family}")

"""The code's shape that a reader relies on: every mode name resolves to its class, in the
family folder its name says; the layers import downwards only, and no import goes in a circle."""

import import_graph
import pytest

from easylaunch.modes import MODES, get_mode

# The packages modes live in: this machine, batch schedulers (and the modes made of them),
# workstations over SSH, clouds. A new mode or scheduler goes into one of them.
FAMILIES = ("local", "scheduled", "schedulers", "ssh", "cloud")


@pytest.mark.parametrize("name", sorted(MODES))
def test_every_mode_name_resolves_in_its_family(name):
    kind = get_mode(name)
    assert kind.name == name
    assert callable(kind.create)
    module = MODES[name].split(":")[0]
    assert module.split(".")[:2] == ["easylaunch", "modes"]
    assert module.split(".")[2] in FAMILIES, f"{name}: {module} is in no family's package"


def test_no_layer_imports_a_higher_one():
    """settings -> runs -> modes -> tracking -> api / results -> cli, dashboard: a module imports
    its own layer and those below (late imports included, type-only imports not)."""
    wrong = import_graph.layer_violations(import_graph.all_imports())
    assert not wrong, "imports of a higher layer:\n" + "\n".join(map(str, wrong))


def test_no_import_circles():
    loops = import_graph.circles(import_graph.all_imports())
    assert not loops, "import circles:\n" + "\n".join(" -> ".join(loop) for loop in loops)


def test_the_public_import_paths_users_have_still_work():
    """What scripts written before the layers import (the package root, easylaunch.api, the
    public modules)."""
    import easylaunch
    from easylaunch import api, checkpoint, dist, errors, results

    for name in easylaunch.__all__:
        assert getattr(easylaunch, name) is not None, name
    for name in api.__all__:
        assert getattr(api, name) is getattr(easylaunch, name), name
    assert easylaunch.NoSuchJob is easylaunch.NoSuchRun
    assert results.load_sweep is easylaunch.load_sweep
    assert errors.LaunchError is easylaunch.LaunchError
    assert callable(checkpoint.save) and callable(dist.topology)

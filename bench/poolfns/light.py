"""A function whose module imports nothing heavy."""


def noop(doodad_config, variant):
    return None

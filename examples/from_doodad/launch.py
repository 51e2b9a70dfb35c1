"""A doodad easy_launch script, ported by changing one import.

    EASYLAUNCH_CONFIG=examples/from_doodad/config_private.py \\
        python examples/from_doodad/launch.py [here_no_doodad|local]
"""

import sys

from easylaunch import run_experiment  # was: from doodad.easy_launch.python_function import


def example(doodad_config, variant):
    x = variant['x']
    y = variant['y']
    z = variant['z']
    print("sum", x + y + z)
    print("exp_name", doodad_config.exp_name)
    print("base_log_dir", doodad_config.base_log_dir)
    return x + y + z


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "local"
    for z in (3, 4):
        run_experiment(example, exp_name='doodad-example', mode=mode, use_gpu=False,
                       variant=dict(x=1, y=2, z=z), gpu_id=0, skip_wait=False)

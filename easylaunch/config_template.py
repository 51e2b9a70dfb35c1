"""easylaunch settings: every key, its default and its type.

Copy this file with ``easylaunch init`` and edit the copy. easylaunch looks for settings in
this order and uses the first file it finds:

1. the ``config=`` argument of ``run_experiment`` / ``run_sweep``;
2. the file named by the ``EASYLAUNCH_CONFIG`` environment variable;
3. ``./easylaunch_config.py`` in the working directory;
4. ``~/.config/easylaunch/config.py``.

Names missing from that file take the defaults below. Only UPPERCASE names are settings; an
unknown UPPERCASE name gets a warning naming the closest known key. Each value is checked
against the type written here before anything is launched.
"""

# ---------------------------------------------------------------------------------------------
# Code and data
# ---------------------------------------------------------------------------------------------

# Folders holding Python code your function imports. Each entry is a path, or a dict with
# ``local_dir`` and ``mount_point`` (where container modes mount it). Every launch snapshots
# them (once per unique content) and puts the snapshot on PYTHONPATH, so editing code after
# launching cannot change runs that are already queued.
CODE_DIRS_TO_MOUNT: list = []

# Data folders: a list of dicts with ``local_dir`` and ``mount_point``. In ``local`` mode a
# folder is made reachable at its mount_point through a symbolic link (created if missing;
# refused if something else is already there); container modes bind-mount it.
NON_CODE_DIRS_TO_MOUNT: list = []

# Snapshot patterns left out of every code snapshot (matched against each file and folder name).
CODE_SNAPSHOT_EXCLUDES: list = [
    ".git", "__pycache__", "*.pyc", "*.egg-info", ".mypy_cache", ".pytest_cache",
    ".ruff_cache", ".venv", "venv", "node_modules", ".ipynb_checkpoints",
]

# A code snapshot larger than this is refused (the error names the largest files).
CODE_SNAPSHOT_MAX_MB: int = 200

# ---------------------------------------------------------------------------------------------
# Local modes (here_no_doodad, local)
# ---------------------------------------------------------------------------------------------

# Root of all run folders: <LOCAL_LOG_DIR>/<exp_name>/<date>_<exp_name>_<id>/.
# ``base_log_dir=`` of run_experiment overrides it for one call.
LOCAL_LOG_DIR: str = "~/easylaunch-logs"

# GPU ids that ``local`` runs with use_gpu=True are pinned to (through CUDA_VISIBLE_DEVICES).
# None: detect them from CUDA_VISIBLE_DEVICES, else from ``nvidia-smi``.
LOCAL_GPU_IDS: list | None = None

# Python interpreter for ``local`` runs. None: the one running the launching script.
LOCAL_PYTHON: str | None = None

# Seconds a cancelled ``local`` run gets between SIGTERM and SIGKILL.
LOCAL_CANCEL_GRACE_SECONDS: float = 5.0

# The registry of launched runs (SQLite) that ``easylaunch ls`` and ``get_job`` read.
# None: $XDG_DATA_HOME/easylaunch/registry.sqlite3 (~/.local/share/easylaunch/registry.sqlite3).
REGISTRY_PATH: str | None = None

# ---------------------------------------------------------------------------------------------
# Slurm modes (slurm, sss, htp); names kept from doodad's easy_launch.
# ---------------------------------------------------------------------------------------------

# Named resource requests; ``slurm_config_name=`` picks one, else "gpu" when use_gpu, else "cpu".
# Fields: account_name, partition, n_gpus, max_num_cores_per_node, n_cpus_per_task,
# time_in_mins, n_nodes (None: enough nodes for the cores asked), extra_flags (sbatch options).
SLURM_CONFIGS: dict = dict(
    cpu=dict(
        account_name=None,
        partition=None,
        n_gpus=0,
        max_num_cores_per_node=8,
        n_cpus_per_task=1,
        time_in_mins=60,
        n_nodes=None,
        extra_flags="",
    ),
    gpu=dict(
        account_name=None,
        partition=None,
        n_gpus=1,
        max_num_cores_per_node=8,
        n_cpus_per_task=2,
        time_in_mins=60,
        n_nodes=None,
        extra_flags="",
    ),
)

# Seconds before the time limit that Slurm sends SIGUSR1 (--signal), so a run records "timeout"
# instead of dying silently.
SLURM_SIGNAL_SECONDS: int = 120

# ``slurm`` mode (submits right away; the launching machine is a login node, LOCAL_LOG_DIR is on
# a file system the compute nodes share). Python on the compute nodes (None: the interpreter
# running the launching script) and shell commands run before it (e.g. "module load cuda").
SLURM_PYTHON: str | None = None
SLURM_PRE_CMDS: list = []
# Node-local folder that ``env_pack=`` broadcasts the packed environment to (sbcast).
ENV_BROADCAST_DIR: str = "/tmp"

# ``sss`` and ``htp`` modes write a batch folder to copy to the cluster. Cluster-side absolute
# paths: where the batch folders go, and where runs write their logs.
SLURM_DIRECTORY_FOR_JOB_SCRIPT: str | None = None
SSS_LOG_DIR: str | None = None
# Code folders that already exist on the cluster (cluster paths; mounted and put on PYTHONPATH
# in addition to the snapshots of CODE_DIRS_TO_MOUNT that travel in the batch folder).
SSS_CODE_DIRS_TO_MOUNT: list = []
# Cluster data folders: dicts of local_dir (a cluster path) and mount_point.
SSS_NON_CODE_DIRS_TO_MOUNT: list = []
# Singularity images (required by sss; htp uses SSS_CPU_IMAGE when set, else plain Python).
SSS_GPU_IMAGE: str | None = None
SSS_CPU_IMAGE: str | None = None
# Python inside the image, and shell commands run inside the container before it.
SSS_PYTHON: str = "python3"
SSS_PRE_CMDS: list = []
# Extra arguments of ``singularity exec`` (e.g. "--writable -B /usr/lib64").
BRC_EXTRA_SINGULARITY_ARGS: str = ""
# The seed's one-file list of sbatch commands; a second launch in the same process appends to
# it, a new process starts it afresh. None: write only the batch folder's submit.sh.
SSS_SCRIPT_PATH: str | None = "/tmp/script_to_scp_over.sh"
# ``user@host`` of the cluster's login node, for the printed copy command.
SSS_CLUSTER_HOST: str = "CLUSTER"

# ``htp``: "packer" (easylaunch's own: N workers in one allocation pull tasks from the task file;
# works on any Slurm) or "ht_helper" (BRC's ht_helper.sh, reading TASKFILE_PATH_ON_BRC).
HTP_RUNNER: str = "packer"
TASKFILE_PATH_ON_BRC: str | None = None
HT_HELPER_PREAMBLE: str = "module load gcc openmpi"
HT_HELPER_PYTHON_MODULE: str = "python/3.5"

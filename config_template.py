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
# Restarts (run_experiment's ``max_restarts=`` and ``restart_on_error=`` override these)
# ---------------------------------------------------------------------------------------------

# How many times a run starts again after a time limit, a preemption or spot interruption, or a
# lost process (killed, node failure), resuming from its last easylaunch.checkpoint.save().
# 0: never. A cancel is never restarted.
MAX_RESTARTS: int = 0

# Also restart a run whose function raised an exception (within MAX_RESTARTS).
RESTART_ON_ERROR: bool = False

# Seconds a function that saves checkpoints gets, after a stop notice (the time-limit warning,
# SIGTERM, a spot notice), to reach its next easylaunch.checkpoint.save(), which then ends it;
# a function that never saved stops at once. Keep it below SLURM_SIGNAL_SECONDS and the time the
# scheduler or cloud gives between its notice and the kill.
CHECKPOINT_GRACE_SECONDS: float = 20.0

# ---------------------------------------------------------------------------------------------
# Trackers (run_experiment's and run_sweep's ``trackers=`` override this)
# ---------------------------------------------------------------------------------------------

# Trackers each run's log_metrics lines are also sent to, from inside the run: any of "wandb",
# "mlflow", "tensorboard" (the extras easylaunch[wandb], easylaunch[mlflow], where the run
# runs). The tracker's run is the easylaunch run: W&B's run id is the run id (resume="allow"),
# its group the sweep id, its project WANDB_PROJECT or the experiment name; MLflow's run is
# tagged easylaunch.run_id, in the experiment of the run's name, in MLFLOW_TRACKING_URI or else
# the file store <log root>/mlruns; TensorBoard's event files are in <run folder>/tensorboard.
# The config is the variant. A restarted run goes on in the same tracker run, its steps
# continuing. A tracker that cannot start is a warning in the run's stderr.log, not a failure.
TRACKERS: list = []

# ---------------------------------------------------------------------------------------------
# Notifications
# ---------------------------------------------------------------------------------------------

# Told when a sweep's last run ends, with a short JSON summary (experiment, sweep, counts by
# state, the failed runs and their errors), by whichever easylaunch process sees it first:
# wait_all() in the launching script, `easylaunch watch`, `easylaunch ls`. Each end is told
# once (a delivery that fails is said on stderr). NOTIFY_COMMAND: a command (an argv list, or
# a string split as a shell would, never run by a shell) that gets the JSON on its stdin.
# NOTIFY_WEBHOOK: an http(s) URL that gets it as a JSON POST (a Slack or ntfy webhook; the URL
# is never printed, it may hold a token).
NOTIFY_COMMAND: str | list | None = None
NOTIFY_WEBHOOK: str | None = None

# Also tell each failed run as it fails (its id, experiment and error), not only the sweep end.
NOTIFY_FAILED_RUNS: bool = False

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

# True: ``local`` runs outlive the launching script (``detach=True`` of run_experiment, for one
# launch). A small supervisor process starts them, at most max_parallel at once; they are
# tracked, followed and cancelled from any later process (easylaunch ls / logs / cancel).
# False: the launching script waits for its runs at exit, and takes them with it if killed.
LOCAL_DETACH: bool = False

# True: every launch says in one line what it started (how many runs, of which experiment, in
# which mode, where their folders are) and the command that follows them. False: it is quiet
# (errors and notices are still said).
LAUNCH_LINE: bool = True

# Permissions of run folders and of the stores beside them (.blobs holds pickled functions):
# 0o700 keeps them private to you; 0o750 shares them read-only with your group (e.g. a lab on
# a shared cluster file system). The registry and saved settings are always private (0o600).
RUN_FOLDER_MODE: int = 0o700

# A pickled function or variant larger than this many MB gets a warning naming its largest
# parts (a captured dataset, a model): pass paths and load inside the function instead.
LARGE_PAYLOAD_WARN_MB: float = 10.0

# The registry of launched runs (SQLite) that ``easylaunch ls`` and ``get_job`` read.
# None: $XDG_DATA_HOME/easylaunch/registry.sqlite3 (~/.local/share/easylaunch/registry.sqlite3).
REGISTRY_PATH: str | None = None

# ---------------------------------------------------------------------------------------------
# Containers on this machine (local_singularity, local_docker) and slurm_singularity
# ---------------------------------------------------------------------------------------------

# The Singularity/Apptainer image of local_singularity and slurm_singularity runs, and shell
# commands run inside the container before Python. The image needs a Python of the launching
# machine's minor version with cloudpickle (``easylaunch doctor`` checks it).
SINGULARITY_IMAGE: str | None = None
SINGULARITY_PRE_CMDS: list = []
SINGULARITY_PYTHON: str = "python3"

# The Docker image of local_docker runs without and with use_gpu (None: DOCKER_IMAGE), and the
# engine that runs it: "docker" or "podman" (None: whichever is on PATH, docker first).
DOCKER_IMAGE: str | None = None
GPU_DOCKER_IMAGE: str | None = None
DOCKER_ENGINE: str | None = None
DOCKER_PYTHON: str = "python3"

# ---------------------------------------------------------------------------------------------
# Remote clusters and workstations, reached over SSH (modes slurm, sss, htp and ssh)
# ---------------------------------------------------------------------------------------------

# Named remote machines: name -> dict(host=..., log_dir=..., python=...). ``host`` is a Host
# name of ~/.ssh/config or user@host[:port]: logging in is left to OpenSSH (keys, agent,
# ProxyJump); easylaunch never asks for a password. ``log_dir``: where runs go there (default
# SSH_LOG_DIR); ``python``: the Python there (default python3; it needs cloudpickle and this
# machine's minor version). Optional: ``ssh_config`` (a file for ssh -F), ``identity_file``.
# doodad's SSH_HOSTS entries (username, hostname) are read as they are.
CLUSTERS: dict = {}
# The cluster the Slurm modes submit to when a launch names none (``cluster="name"``). None:
# ``slurm`` submits on this machine and ``sss``/``htp`` write a batch folder to copy by hand.
DEFAULT_CLUSTER: str | None = None
# The machine ``ssh`` mode runs on when a launch names none (doodad's key).
SSH_DEFAULT_HOST: str | None = None
# Where runs go on a remote machine whose CLUSTERS entry names no log_dir (doodad's key).
SSH_LOG_DIR: str = "~/easylaunch-logs"
# A key file for remote machines whose entry names none (doodad's key; None: ssh's own choice).
SSH_PRIVATE_KEY: str | None = None

# ---------------------------------------------------------------------------------------------
# Slurm modes (slurm, sss, htp); names kept from doodad's easy_launch.
# ---------------------------------------------------------------------------------------------

# Named resource requests; ``slurm_config_name=`` picks one, else "gpu" when use_gpu, else "cpu".
# Fields: account_name, partition, n_gpus, max_num_cores_per_node (htp's CPUs an allocation
# takes of a node, and the cores a node gives a run's tasks; None: what a node of the partition
# has, asked of sinfo, or one node for a batch written to copy), n_cpus_per_task,
# time_in_mins, n_nodes (None: enough nodes for the cores asked), mem ("16G"), qos, constraint,
# gpu_string (":A100" asks for --gres=gpu:A100:N), extra_flags (sbatch options). One launch can
# replace some: run_experiment(..., partition=, time_in_mins=, mem=, account=, qos=,
# constraint=, n_cpus_per_task=, n_gpus=, n_nodes=).
SLURM_CONFIGS: dict = dict(
    cpu=dict(
        account_name=None,
        partition=None,
        n_gpus=0,
        max_num_cores_per_node=None,
        n_cpus_per_task=1,
        time_in_mins=60,
        n_nodes=None,
        extra_flags="",
    ),
    gpu=dict(
        account_name=None,
        partition=None,
        n_gpus=1,
        max_num_cores_per_node=None,
        n_cpus_per_task=2,
        time_in_mins=60,
        n_nodes=None,
        extra_flags="",
    ),
)

# Seconds before the time limit that Slurm sends SIGUSR1 (--signal), so a run can save and
# records "timeout" instead of dying silently (0: no warning; the limit's SIGTERM still reads as
# a timeout).
SLURM_SIGNAL_SECONDS: int = 120

# ``slurm`` mode (submits right away; the launching machine is a login node, LOCAL_LOG_DIR is on
# a file system the compute nodes share). Python on the compute nodes (None: the interpreter
# running the launching script) and shell commands run before it (e.g. "module load cuda").
SLURM_PYTHON: str | None = None
SLURM_PRE_CMDS: list = []
# Node-local folder that ``env_pack=`` broadcasts the packed environment to (Slurm: sbcast;
# PBS: one mpiexec rank per node copies it).
ENV_BROADCAST_DIR: str = "/tmp"

# ---------------------------------------------------------------------------------------------
# PBS Pro mode (pbs), as on ALCF's Polaris and Aurora.
# ---------------------------------------------------------------------------------------------

# Named resource requests; ``pbs_config_name=`` picks one, else "gpu" when use_gpu, else "cpu".
# Fields: select (nodes), ncpus, ngpus and mpiprocs (ranks) per node, depth (cores per rank;
# default ncpus // mpiprocs), cpu_bind (mpiexec's --cpu-bind, default "depth"), mem, walltime
# (minutes, or "HH:MM:SS"), queue, project (-A), filesystems (ALCF: e.g. "home:eagle"), place
# (e.g. "scatter"), directives (a list of further #PBS options, e.g. ["-m n"]).
PBS_CONFIGS: dict = dict(
    cpu=dict(select=1, ncpus=1, walltime=60),
    gpu=dict(select=1, ncpus=8, ngpus=1, walltime=60),
)
# Python on the compute nodes (None: the interpreter running the launching script, or the
# cluster's python from CLUSTERS) and shell commands run before it (e.g. "module load conda").
PBS_PYTHON: str | None = None
PBS_PRE_CMDS: list = []
# Seconds before the walltime that a PBS pool warns its runs (SIGUSR1, as Slurm's --signal), so
# they save and go on in the pool's next job. PBS itself warns no one (0: no warning; the pool
# then ends at its walltime).
PBS_SIGNAL_SECONDS: int = 120

# ``sss``, ``htp`` and ``pbs_htp`` write a batch folder and submit it where they can: on this
# machine where sbatch (qsub) is on PATH (a login node), or over SSH (cluster=, DEFAULT_CLUSTER).
# SSS_SUBMIT (or a launch's submit=): None submits where it can, else writes the batch to copy by
# hand (as doodad did; HTP_RUNNER="ht_helper" always does); False always writes it to copy; True
# always submits. A run of a batch nobody submitted says so, and a wait for it raises at once.
SSS_SUBMIT: bool | None = None
# Cluster-side absolute paths: where runs write their logs (a batch copied by hand needs it;
# submitted here the default is the launch's log folder, over SSH the cluster's log_dir), and
# where the batch folders go (None: SSS_LOG_DIR/.batches). Consecutive launches of one script
# grow one batch copied by hand, as doodad's did.
SSS_LOG_DIR: str | None = None
SLURM_DIRECTORY_FOR_JOB_SCRIPT: str | None = None
# Code folders that already exist on the cluster (cluster paths; mounted and put on PYTHONPATH
# in addition to the snapshots of CODE_DIRS_TO_MOUNT that travel in the batch folder). One at
# the mount_point of a CODE_DIRS_TO_MOUNT folder replaces its snapshot, as in doodad.
SSS_CODE_DIRS_TO_MOUNT: list = []
# Cluster data folders: dicts of local_dir (a cluster path) and mount_point.
SSS_NON_CODE_DIRS_TO_MOUNT: list = []
# Singularity images (required by sss; htp uses SSS_CPU_IMAGE when set, else plain Python).
# SSS_IMAGE (doodad's, as railrl's configs set it) is the image of both where they are unset.
SSS_GPU_IMAGE: str | None = None
SSS_CPU_IMAGE: str | None = None
SSS_IMAGE: str | None = None
# The Python of the runs: inside the image (None: python3 there), and, for htp runs without
# an image, in place of SLURM_PYTHON / PBS_PYTHON (None: those; else the launching script's own
# interpreter on a login node, the cluster's python over SSH, python3 in a batch copied by hand).
# Shell commands run inside the container before it.
SSS_PYTHON: str | None = None
SSS_PRE_CMDS: list = []
# Extra arguments of ``singularity exec`` (e.g. "--writable -B /usr/lib64").
BRC_EXTRA_SINGULARITY_ARGS: str = ""
# The seed's one-file list of sbatch commands; a second launch in the same process appends to
# it, a new process starts it afresh. None: write only the batch folder's submit.sh.
SSS_SCRIPT_PATH: str | None = "/tmp/script_to_scp_over.sh"
# ``user@host`` of the cluster's login node, for the printed copy command of a batch copied by
# hand (None: the command names the cluster from cluster=, else says where to copy in words).
SSS_CLUSTER_HOST: str | None = None

# ``htp``: "packer" (easylaunch's own: N workers in one allocation pull tasks from the task file;
# works on any Slurm) or "ht_helper" (BRC's ht_helper.sh, reading TASKFILE_PATH_ON_BRC).
HTP_RUNNER: str = "packer"
TASKFILE_PATH_ON_BRC: str | None = None
HT_HELPER_PREAMBLE: str = "module load gcc openmpi"
HT_HELPER_PYTHON_MODULE: str = "python/3.5"

# ---------------------------------------------------------------------------------------------
# EC2 mode (ec2): runs on AWS instances that sync their log folders to S3 and terminate when done
# ---------------------------------------------------------------------------------------------

# Where code, bundles and run logs go: "s3://bucket/prefix". Required. A run's log folder is
# mirrored to <prefix>/logs/<exp_name>/<run folder>/; code snapshots and bundles are stored once
# per unique content under <prefix>/snapshots/ and <prefix>/bundles/.
AWS_S3_PATH: str | None = None

# The AWS region instances start in. None: boto3's default (AWS_DEFAULT_REGION, ~/.aws/config).
AWS_REGION: str | None = None

# Instance types for runs without and with use_gpu.
AWS_INSTANCE_TYPE: str = "c5.large"
AWS_GPU_INSTANCE_TYPE: str = "g4dn.xlarge"

# Machine images by region, for runs without and with use_gpu: {"us-east-1": "ami-..."}.
# The image needs bash and a Python of the launching machine's minor version (pickled functions
# load only there), or Docker when AWS_DOCKER_IMAGE is set.
AWS_IMAGE_IDS: dict = {}
AWS_GPU_IMAGE_IDS: dict = {}

# Maximum price in USD per instance-hour for spot instances. None: on-demand instances.
# AWS_GPU_SPOT_PRICE applies to use_gpu runs (None: AWS_SPOT_PRICE).
AWS_SPOT_PRICE: float | None = None
AWS_GPU_SPOT_PRICE: float | None = None

# EC2 key pair name for ssh access (None: no key), security group ids (empty: the default group)
# and subnet id (None: the default subnet).
AWS_KEY_NAME: str | None = None
AWS_SECURITY_GROUP_IDS: list = []
AWS_SUBNET_ID: str | None = None

# The IAM instance profile (name or ARN) the instances run as. Required: its role must allow
# s3:GetObject, s3:PutObject and s3:ListBucket on AWS_S3_PATH (and ec2:CreateTags, optional, so
# instances can tag themselves). No credentials ever travel to the instances.
AWS_IAM_INSTANCE_PROFILE: str | None = None

# Files of a run's log folder that are synced to S3 (glob patterns matched against the file name
# and its path in the folder). status.json, result.pkl, stdout.log and stderr.log always are.
AWS_FILE_PATTERNS_TO_SAVE: list = ["*"]

# Seconds between two syncs of a run's log folder to S3 (status.json is synced whenever it
# changes; everything is synced once more when the runs end or a spot interruption is announced).
AWS_SYNC_INTERVAL_SECONDS: float = 60.0

# Runs per instance: a sweep's runs are packed this many to an instance, run side by side; the
# instance terminates when all of them have ended. The mode option num_exps_per_instance= wins.
AWS_NUM_EXPS_PER_INSTANCE: int = 1

# Docker image the runs start in (with --gpus all for use_gpu; it needs python3 and cloudpickle).
# None: the image's own Python, AWS_PYTHON.
AWS_DOCKER_IMAGE: str | None = None

# Python on the instance (runs the instance agent, and the runs without AWS_DOCKER_IMAGE), and
# the packages ``python -m pip`` installs there at boot (empty: the image has them; the image
# needs pip otherwise). The agent needs boto3; runs need cloudpickle (best pinned to the
# launching machine's version). A failed boot shuts the instance down.
AWS_PYTHON: str = "python3"
AWS_PIP_REQUIREMENTS: list = ["boto3", "cloudpickle"]

# ---------------------------------------------------------------------------------------------
# GCP mode (gcp): runs on Compute Engine instances that sync their log folders to Google Cloud
# Storage and delete themselves when done. Credentials: Application Default Credentials
# (``gcloud auth application-default login``, or GOOGLE_APPLICATION_CREDENTIALS). A launch's
# gcp_kwargs=dict(zone=..., preemptible=True) overrides the GCP_ settings of the same name.
# ---------------------------------------------------------------------------------------------

# The project instances start in. None: the project of your credentials (or
# GOOGLE_CLOUD_PROJECT).
GCP_PROJECT: str | None = None

# The zone instances start in.
GCP_ZONE: str = "us-central1-a"

# The bucket and prefix code, bundles and run logs go to: "gs://bucket/prefix". Required. Laid
# out as under AWS_S3_PATH: <prefix>/logs/<exp_name>/<run folder>/, <prefix>/snapshots/, ...
GCP_GCS_PATH: str | None = None

# Boot images for runs without and with use_gpu: an image name, or "family/<family>" for the
# newest image of a family, in the given image project. The image needs bash and a Python of
# the launching machine's minor version, or Docker when GCP_DOCKER_IMAGE is set.
GCP_IMAGE: str = "family/debian-12"
GCP_IMAGE_PROJECT: str = "debian-cloud"
GCP_GPU_IMAGE: str = "family/common-cu124-debian-11-py310"
GCP_GPU_IMAGE_PROJECT: str = "deeplearning-platform-release"
GCP_DISK_SIZE_GB: int = 50

# Machine types for runs without and with use_gpu, and the GPUs a use_gpu run's instance gets.
GCP_MACHINE_TYPE: str = "n1-standard-4"
GCP_GPU_MACHINE_TYPE: str = "n1-standard-8"
GCP_GPU_TYPE: str = "nvidia-tesla-t4"
GCP_GPU_COUNT: int = 1

# Preemptible (legacy, at most 24 hours) or Spot instances: cheaper, and taken back at any time;
# the shutdown-script syncs the runs' logs a last time when that happens. At most one of them.
GCP_PREEMPTIBLE: bool = False
GCP_SPOT: bool = False

# The service account instances run as (None: the project's default Compute Engine account) and
# its scopes. It needs storage.objects.get/create/list on GCP_GCS_PATH and
# compute.instances.delete on its own instance. No credentials ever travel to the instances.
GCP_SERVICE_ACCOUNT: str | None = None
GCP_SCOPES: list = ["https://www.googleapis.com/auth/cloud-platform"]

# The VPC network instances attach to (with an external address, to reach the APIs).
GCP_NETWORK: str = "global/networks/default"

# As the AWS_ keys of the same names: files synced, seconds between syncs, runs per instance,
# an optional Docker image, and the Python and pip packages on the instance (the agent needs
# google-cloud-storage; runs need cloudpickle). A failed boot shuts the instance down.
GCP_FILE_PATTERNS_TO_SAVE: list = ["*"]
GCP_SYNC_INTERVAL_SECONDS: float = 60.0
GCP_NUM_EXPS_PER_INSTANCE: int = 1
GCP_DOCKER_IMAGE: str | None = None
GCP_PYTHON: str = "python3"
GCP_PIP_REQUIREMENTS: list = ["google-cloud-storage", "cloudpickle"]

# ---------------------------------------------------------------------------------------------
# Azure mode (azure): runs on Azure VMs that sync their log folders to a Blob Storage container
# and delete themselves (with their disk, NIC and IP) when done; doodad's mode='azure'.
# Credentials on this machine: the service principal below where it is set, else
# azure-identity's chain (AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET in the
# environment, a managed identity, ``az login``). The VMs get none: they use AZURE_IDENTITY.
# ---------------------------------------------------------------------------------------------

# The subscription and resource group VMs start in (doodad: AZ_SUB_ID). Required.
AZURE_SUBSCRIPTION_ID: str | None = None
AZURE_RESOURCE_GROUP: str | None = None

# The region VMs start in (doodad: DEFAULT_AZURE_REGION).
AZURE_LOCATION: str = "eastus"

# A service principal for this machine only (doodad: AZ_TENANT_ID, AZ_CLIENT_ID, AZ_SECRET).
# None: azure-identity's chain. Never sent anywhere but Microsoft Entra ID.
AZURE_TENANT_ID: str | None = None
AZURE_CLIENT_ID: str | None = None
AZURE_CLIENT_SECRET: str | None = None

# The container and prefix code, bundles and run logs go to: "az://container/prefix" (doodad:
# AZ_CONTAINER, as az://AZ_CONTAINER/easylaunch). Required. Laid out as under AWS_S3_PATH.
AZURE_STORAGE_PATH: str | None = None
# The container's account: its blob endpoint, "https://ACCOUNT.blob.core.windows.net" (None:
# the account of the connection string below). The VMs reach it with AZURE_IDENTITY.
AZURE_STORAGE_ACCOUNT_URL: str | None = None
# The account's connection string, for this machine only (doodad: AZ_CONN_STR; None: the
# AZURE_STORAGE_CONNECTION_STRING environment variable, else the credentials above).
AZURE_STORAGE_CONNECTION_STRING: str | None = None

# The resource id of a user-assigned managed identity every VM gets; it needs Storage Blob Data
# Contributor on the account and Virtual Machine Contributor on the resource group (a VM
# deletes itself when its runs end). Required.
AZURE_IDENTITY: str | None = None

# The resource id of the subnet the VMs' NICs join. Required. A public IP per VM (Standard SKU,
# deleted with it) gives it outbound access; False where the subnet has a NAT gateway.
AZURE_SUBNET_ID: str | None = None
AZURE_PUBLIC_IP: bool = True

# Images as URNs, PUBLISHER:OFFER:SKU:VERSION (az vm image list). The image needs python3 with
# pip (or AZURE_PIP_REQUIREMENTS = [] and the packages installed); cloud-init runs the boot
# script as custom data.
AZURE_IMAGE: str = "Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:latest"
AZURE_GPU_IMAGE: str = "microsoft-dsvm:ubuntu-hpc:2204:latest"
AZURE_DISK_SIZE_GB: int = 64

# VM sizes (doodad: DEFAULT_AZURE_INSTANCE_TYPE). For use_gpu runs AZURE_GPU_VM_SIZE, or where
# it is None the size with AZURE_GPU_COUNT GPUs of AZURE_GPU_MODEL (doodad:
# DEFAULT_AZURE_GPU_MODEL): nvidia-tesla-t4, nvidia-tesla-v100, nvidia-a100, nvidia-h100.
AZURE_VM_SIZE: str = "Standard_D2s_v5"
AZURE_GPU_VM_SIZE: str | None = None
AZURE_GPU_MODEL: str = "nvidia-tesla-t4"
AZURE_GPU_COUNT: int = 1

# Spot VMs (evicted when Azure needs the capacity: the checkpoint is synced and the run goes on
# on a new VM, once per eviction, as EC2 spot and GCE preemption). AZURE_SPOT_MAX_PRICE: the
# most a VM may cost an hour in US dollars; None: up to the on-demand price.
AZURE_SPOT: bool = False
AZURE_SPOT_MAX_PRICE: float | None = None

# The public key Azure puts on the VMs for user "easylaunch". None: a key whose private half no
# one has (the VMs need no logins).
AZURE_SSH_PUBLIC_KEY: str | None = None

# As the AWS_ keys of the same names. The agent needs azure-storage-blob and azure-identity.
AZURE_FILE_PATTERNS_TO_SAVE: list = ["*"]
AZURE_SYNC_INTERVAL_SECONDS: float = 60.0
AZURE_NUM_EXPS_PER_INSTANCE: int = 1
AZURE_DOCKER_IMAGE: str | None = None
AZURE_PYTHON: str = "python3"
AZURE_PIP_REQUIREMENTS: list = ["azure-storage-blob", "azure-identity", "cloudpickle"]

# ---------------------------------------------------------------------------------------------
# Azure ML mode (aml): each run an Azure ML command job (the seed's aml_client). The seed's files
# are read as they are: AML_YAML names its aml.yaml (compute_target, docker.image,
# experiment_name, multi_process, gpu_per_node, env, datastore_name, config_param's *_folder
# paths, aml_config), AML_CONFIG its workspace config.json (subscription_id, resource_group,
# workspace_name); a setting below wins over them. Credentials on this machine as in the Azure
# mode (AZURE_TENANT_ID... or azure-identity's chain); the jobs get none: they use the compute's
# managed identity (it needs Storage Blob Data Contributor on the datastore's account).
# ---------------------------------------------------------------------------------------------

AML_YAML: str | None = None
AML_CONFIG: str | None = None
AML_SUBSCRIPTION_ID: str | None = None
AML_RESOURCE_GROUP: str | None = None
AML_WORKSPACE: str | None = None

# The compute target (cluster) jobs run on; the mode option compute= wins.
AML_COMPUTE: str | None = None

# The Docker image jobs run in, or a registered environment "azureml:NAME:VERSION" (which wins).
# It needs AML_PYTHON with cloudpickle, azure-storage-blob and azure-identity (or
# AML_PIP_REQUIREMENTS installs them when a job starts).
AML_IMAGE: str | None = None
AML_ENVIRONMENT: str | None = None

# The Azure ML experiment jobs are filed under. None: the launch's exp_name.
AML_EXPERIMENT: str | None = None

# GPUs per node of the compute. A launch asking for num_gpus=N (the seed's -n N; default with
# use_gpu: one node's) gets N / AML_GPU_PER_NODE nodes; with AML_MULTI_PROCESS (None: True, the
# seed's default) a process per GPU, else one per node, started by Azure ML's distribution
# (AML_DISTRIBUTION: "pytorch", or "mpi"), each with its RANK, LOCAL_RANK and WORLD_SIZE.
AML_GPU_PER_NODE: int | None = None
AML_MULTI_PROCESS: bool | None = None
AML_DISTRIBUTION: str = "pytorch"

# Extra environment variables of every job (aml.yaml's env), e.g. {"NCCL_IB_DISABLE": "0"}.
AML_ENV: dict = {}

# The datastore (a Blob container) code, bundles and run folders go to, under
# AML_STORAGE_PREFIX. None: the workspace's default datastore. Its blob endpoint is
# https://ACCOUNT.blob.core.windows.net unless AML_STORAGE_ACCOUNT_URL says otherwise.
AML_DATASTORE: str | None = None
AML_STORAGE_PREFIX: str = "easylaunch"
AML_STORAGE_ACCOUNT_URL: str | None = None

# Folders of that datastore mounted into every job: read-only data folders by name (a run finds
# each at the path in AZURE_ML_INPUT_<name>), and one output folder mounted read-write
# (AZURE_ML_OUTPUT_output). Paths in the datastore, or azureml:// URIs.
AML_DATA_FOLDERS: dict = {}
AML_OUTPUT_FOLDER: str | None = None

# As the AWS_ keys of the same names, and the folder jobs work in on the nodes.
AML_FILE_PATTERNS_TO_SAVE: list = ["*"]
AML_SYNC_INTERVAL_SECONDS: float = 30.0
AML_NUM_EXPS_PER_INSTANCE: int = 1
AML_PYTHON: str = "python"
AML_PIP_REQUIREMENTS: list = []
AML_WORKDIR: str = "/tmp/easylaunch-aml"

# ---------------------------------------------------------------------------------------------
# Ray mode (ray): each run a job on a Ray cluster, submitted through Ray's Job Submission API;
# the run folders come back through a storage path the cluster and this machine both reach.
# ---------------------------------------------------------------------------------------------

# The cluster's dashboard address, "http://HEAD:8265". None: the RAY_ADDRESS environment
# variable. The mode option address= wins (one settings file, several clusters).
RAY_ADDRESS: str | None = None

# Where code, bundles and run folders go: "s3://bucket/prefix", "gs://bucket/prefix" or
# "az://container/prefix" (Azure Blob Storage). Required. Laid out as under AWS_S3_PATH. The
# cluster's workers reach it with their own credentials (an instance role, a service account, a
# managed identity, or AZURE_STORAGE_CONNECTION_STRING in their environment): none are sent
# with the jobs.
RAY_STORAGE_PATH: str | None = None
# Where that storage is: the S3 region of an s3:// path (None: boto3's default), or the blob
# endpoint of an az:// path's account, "https://ACCOUNT.blob.core.windows.net" (None: the
# account of AZURE_STORAGE_CONNECTION_STRING, which this machine then needs).
RAY_STORAGE_LOCATION: str | None = None

# What each job asks of the cluster (Ray's entrypoint resources): CPUs, and GPUs for use_gpu
# runs. The mode options num_cpus= and num_gpus= win.
RAY_NUM_CPUS: float = 1
RAY_NUM_GPUS: float = 1

# As the AWS_ keys of the same names: files synced, seconds between syncs, runs per job, and
# the Python on the workers (it needs cloudpickle and the storage's library: boto3,
# google-cloud-storage, or azure-storage-blob and azure-identity) with the pip packages
# installed into it when a job starts (empty: it has them).
RAY_FILE_PATTERNS_TO_SAVE: list = ["*"]
RAY_SYNC_INTERVAL_SECONDS: float = 10.0
RAY_NUM_EXPS_PER_INSTANCE: int = 1
RAY_PYTHON: str = "python3"
RAY_PIP_REQUIREMENTS: list = []

# The folder on the worker where a job's runs live while it runs: RAY_WORKDIR/<job's
# submission id>, removed when the job ends (everything in it is synced first). Code snapshots
# stay in RAY_WORKDIR/.snapshots, unpacked once per node and shared by its jobs.
RAY_WORKDIR: str = "/tmp/easylaunch-ray"

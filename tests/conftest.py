import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_DIR = TESTS_DIR.parent


@pytest.fixture
def cfg(tmp_path):
    """Settings for a test: its own log folder, and this folder as the code directory."""
    return {"LOCAL_LOG_DIR": str(tmp_path / "logs"), "CODE_DIRS_TO_MOUNT": [str(TESTS_DIR)]}


@pytest.fixture
def exp():
    """An experiment name no other test uses (the cloud stand-ins live as long as a module)."""
    import uuid

    return f"bad-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def _isolated_settings(tmp_path, monkeypatch):
    """No test reads the developer's own settings files. Each pytest-xdist worker has its own
    ssh connection sockets (XDG_RUNTIME_DIR): a test that ends or kills its connection to the
    test host never cuts another worker's."""
    monkeypatch.delenv("EASYLAUNCH_CONFIG", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    runtime = Path(f"/tmp/el-run-{os.getuid()}-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}")
    runtime.mkdir(mode=0o700, exist_ok=True)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def _registries_closed():
    """The registries a test opened in this process are closed after it (each holds three
    files open: a whole run of the suite would pass select()'s limit of 1024)."""
    from easylaunch.tracking import registry

    before = set(registry._registries)
    yield
    for key in set(registry._registries) - before:
        conn = getattr(registry._registries.pop(key)._local, "conn", None)
        if conn is not None:
            conn.close()


def pytest_configure(config):
    """A suite started in the background (where a shell ignores SIGINT for `cmd &`) still
    tests Ctrl-C: the processes the tests start take SIGINT again, as from a terminal."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_sessionfinish(session, exitstatus):
    """In CI (CI=true) a skipped test is a failure: every backend must have really run."""
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        reporter.write_line(f"CI: {len(skipped)} test(s) were skipped; in CI every test must "
                            "run (install what they need in scripts/setup.sh)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def slurm_cluster():
    """The tests' four-node Slurm cluster, once its nodes answer, else skip (run
    scripts/slurm-up.sh as root). Starts nothing. Slurm's commands find it by its default
    config, /etc/slurm/slurm.conf. (Another worker's job that is ending shows its node
    "completing", and one that waits for a node shows it "planned": it still answers. A node
    another worker's test took down is waited for, up to 2 minutes: that test brings it back.)"""
    if shutil.which("sinfo") is None:
        pytest.skip("Slurm is not installed: run scripts/slurm-up.sh as root")
    deadline = time.monotonic() + 120
    while True:
        out = subprocess.run(["sinfo", "-h", "-N", "-p", "cpu", "-o", "%T"],
                             capture_output=True, text=True)
        answering = [s for s in out.stdout.split() if s.rstrip("+") in (
            "idle", "mixed", "allocated", "completing", "planned")]
        if out.returncode == 0 and len(answering) >= 4:
            return
        if out.returncode != 0 or time.monotonic() > deadline:
            pytest.skip(f"the test cluster's nodes do not all answer "
                        f"({out.stderr.strip() or out.stdout.split()}): run "
                        "scripts/slurm-up.sh as root")
        time.sleep(1)


@pytest.fixture(scope="session")
def pbs_front_end(slurm_cluster):
    """PBS's qsub/qstat/qdel: Slurm's own front ends over the local cluster (Debian's
    slurm-wlm-torque, installed by scripts/slurm-up.sh), else skip."""
    import shutil

    if shutil.which("qsub") is None:
        pytest.skip("no qsub: run scripts/slurm-up.sh as root (installs slurm-wlm-torque)")


def pbs_settings(cfg: dict, walltime: int = 10) -> dict:
    """Settings for PBS jobs on the local cluster through its PBS front ends."""
    import sys

    return dict(cfg, PBS_PYTHON=sys.executable,
                PBS_CONFIGS=dict(cpu=dict(select=1, ncpus=1, walltime=walltime)))


@pytest.fixture
def pbs_cfg(cfg, pbs_front_end):
    return pbs_settings(cfg)


@pytest.fixture
def slurm_cfg(cfg, slurm_cluster):
    """Settings for jobs in the test cluster's default partition (debug: node1 and node2)."""
    import sys

    return dict(cfg, SLURM_PYTHON=sys.executable, SLURM_SIGNAL_SECONDS=30,
                SLURM_CONFIGS=dict(cpu=dict(max_num_cores_per_node=os.cpu_count(),
                                            time_in_mins=10)))


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """The bubblewrap stand-in for singularity on PATH, and an image file."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed: run scripts/slurm-up.sh as root")
    monkeypatch.setenv("PATH", f"{TESTS_DIR / 'bin'}:{os.environ['PATH']}")
    image = tmp_path / "image.sif"
    image.write_text("test image")
    return image


@pytest.fixture
def batch_cfg(slurm_cfg, stand_in, tmp_path):
    """Settings for sss and htp batches on the local cluster, copied there by hand: "cluster"
    folders in tmp_path, runs in the stand-in image."""
    import sys

    return dict(slurm_cfg, SSS_SUBMIT=False,
                SLURM_DIRECTORY_FOR_JOB_SCRIPT=str(tmp_path / "cluster/batches"),
                SSS_LOG_DIR=str(tmp_path / "cluster/logs"), SSS_CPU_IMAGE=str(stand_in),
                SSS_PYTHON=sys.executable, SSS_SCRIPT_PATH=str(tmp_path / "seed.sh"),
                CODE_DIRS_TO_MOUNT=[dict(local_dir=str(TESTS_DIR),
                                         mount_point=str(tmp_path / "in-container/code"))])


def settings_file(tmp_path, **values) -> str:
    """A settings file of the test's own folders (logs, registry), with ``values`` added."""
    path = tmp_path / "settings.py"
    path.write_text(f"LOCAL_LOG_DIR = {str(tmp_path / 'logs')!r}\n"
                    f"CODE_DIRS_TO_MOUNT = [{str(TESTS_DIR)!r}]\n"
                    f"REGISTRY_PATH = {str(tmp_path / 'registry.sqlite3')!r}\n"
                    + "".join(f"{k} = {v!r}\n" for k, v in values.items()))
    return str(path)


SSH_DIR = REPO_DIR / ".test-ssh"
REMOTE_USER = "easyremote"


@pytest.fixture(scope="session")
def ssh_cluster(slurm_cluster):
    """The remote user's home, once its sshd answers (else skip: run scripts/ssh-up.sh)."""
    if not (SSH_DIR / "config").exists():
        pytest.skip("no test sshd: run scripts/ssh-up.sh as root")
    out = subprocess.run(["ssh", "-F", str(SSH_DIR / "config"), "-o", "BatchMode=yes",
                          "easylaunch-test-cluster", "true"], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"the test sshd does not answer ({out.stderr.strip()}): run "
                    "scripts/ssh-up.sh as root")
    return Path(pwd.getpwnam(REMOTE_USER).pw_dir)


@pytest.fixture
def remote_cfg(cfg, ssh_cluster):
    """Settings submitting to the test cluster over SSH, each test in its own folders there."""
    tag = uuid.uuid4().hex[:8]
    return dict(cfg, DEFAULT_CLUSTER="test", SLURM_SIGNAL_SECONDS=30,
                CLUSTERS={"test": {"host": "easylaunch-test-cluster", "log_dir": f"~/runs/{tag}",
                                   "python": "~/venv/bin/python",
                                   "ssh_config": str(SSH_DIR / "config")}},
                SLURM_CONFIGS=dict(cpu=dict(max_num_cores_per_node=os.cpu_count(),
                                            time_in_mins=10)),
                SSS_LOG_DIR=f"{ssh_cluster}/sss-logs/{tag}", SSS_SCRIPT_PATH=None)


@pytest.fixture(scope="module")
def azure_tls(tmp_path_factory):
    """A test certificate for 127.0.0.1 and its key (Azurite and the Azure stand-ins serve
    HTTPS, as Azure does)."""
    import azure_stubs

    return azure_stubs.make_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def azurite(azure_tls, tmp_path_factory):
    """Azurite's blob service over HTTPS with OAuth on: its account's blob endpoint."""
    import azure_stubs

    proc, url = azure_stubs.start_azurite(tmp_path_factory.mktemp("azurite"), azure_tls)
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="session")
def small_venv(tmp_path_factory):
    """A small virtualenv with only cloudpickle (the runner's one dependency)."""
    venv = tmp_path_factory.mktemp("small") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    import cloudpickle

    site = next(venv.glob("lib/python*/site-packages"))
    subprocess.run(["cp", "-r", str(Path(cloudpickle.__file__).parent), str(site)], check=True)
    (site / f"cloudpickle-{cloudpickle.__version__}.dist-info").mkdir()
    return venv

"""The ec2 mode end to end against moto's server on 127.0.0.1.

moto never runs user-data, so the tests play the instance (ec2_stubs.Instance): they read the
user-data back from moto and run it with bash in a sandbox folder, with the metadata service, the
``shutdown`` command and S3 pointed at stand-ins. Fake AWS keys exist only in the environment of
this process and of the sandbox.
"""

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import ec2_stubs
import jobfns
import pytest
from helpers import (
    assert_no_secrets,
    check_a_synced_run,
    fake_terminal,
    launch_and_exit,
    wait_for,
)

from easylaunch import (
    EasyLaunchError,
    JobState,
    LaunchError,
    run_commands,
    run_experiment,
    run_sweep,
)
from easylaunch.modes.cloud import base as cloud_base
from easylaunch.modes.cloud import ec2 as ec2_mode
from easylaunch.modes.cloud import transfer as cloud
from easylaunch_job.cloud.stores import S3Store

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")

REGION = "us-east-1"
PROFILE = "easylaunch-test-profile"
# made up here, so that the grep for them cannot find this file's own text in the code snapshot
KEYS = ("AKIA" + uuid.uuid4().hex[:16].upper(), "fake/" + uuid.uuid4().hex + uuid.uuid4().hex)


@pytest.fixture(scope="module")
def moto():
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=url, aws_access_key_id=KEYS[0],
                       aws_secret_access_key=KEYS[1])
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]  # slow: once
    yield SimpleNamespace(url=url, image=image)
    server.stop()


@pytest.fixture
def aws(moto, monkeypatch, tmp_path):
    """Fake keys and moto's endpoint in the environment; a fresh bucket; an image; a profile."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEYS[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", KEYS[1])
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto.url)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(cloud_base, "AGENT_POLL_SECONDS", 0.2)
    s3, ec2, iam = (boto3.client(s, region_name=REGION) for s in ("s3", "ec2", "iam"))
    bucket = f"easylaunch-test-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):
        iam.create_instance_profile(InstanceProfileName=PROFILE)
    return SimpleNamespace(url=moto.url, bucket=bucket, image=moto.image, s3=s3, ec2=ec2,
                           sandbox=tmp_path / "sandbox",
                           env=ec2_stubs.clean_env(moto.url, KEYS))


@pytest.fixture
def ec2_cfg(cfg, aws):
    return dict(cfg, AWS_S3_PATH=f"s3://{aws.bucket}/exps", AWS_REGION=REGION,
                AWS_IMAGE_IDS={REGION: aws.image}, AWS_GPU_IMAGE_IDS={REGION: aws.image},
                AWS_IAM_INSTANCE_PROFILE=PROFILE, AWS_PIP_REQUIREMENTS=[],
                AWS_PYTHON=sys.executable, AWS_SYNC_INTERVAL_SECONDS=0.5)


@pytest.fixture
def play(aws):
    """Play the instance of a job (or an instance id) on this machine; stopped at teardown."""
    started = []

    def start(job_or_id):
        iid = job_or_id if isinstance(job_or_id, str) else \
            job_or_id.launch_info["backend"]["instance_id"]
        instance = ec2_stubs.Instance(aws.ec2, iid, aws.sandbox, aws.env, REGION)
        started.append(instance)
        return instance

    yield start
    for instance in started:
        instance.stop()


def s3_text(aws, key: str) -> str | None:
    try:
        return aws.s3.get_object(Bucket=aws.bucket, Key=key)["Body"].read().decode()
    except aws.s3.exceptions.NoSuchKey:
        return None


def s3_keys(aws, prefix: str = "") -> list[str]:
    reply = aws.s3.list_objects_v2(Bucket=aws.bucket, Prefix=prefix)
    return [o["Key"] for o in reply.get("Contents", [])]


def s3_status(aws, job) -> dict:
    return json.loads(s3_text(aws, f"{job.launch_info['backend']['log_prefix']}/status.json")
                      or "{}")


def s3_state(aws, job) -> str | None:
    return s3_status(aws, job).get("state")


def describe(aws, instance_id: str) -> dict:
    reply = aws.ec2.describe_instances(InstanceIds=[instance_id])
    return reply["Reservations"][0]["Instances"][0]


def tags(aws, instance_id: str) -> dict:
    return {t["Key"]: t["Value"] for t in describe(aws, instance_id).get("Tags", [])}


def instances_of(aws, exp_name: str) -> list[dict]:
    reply = aws.ec2.describe_instances(
        Filters=[{"Name": "tag:easylaunch:exp", "Values": [exp_name]}])
    return [i for r in reply["Reservations"] for i in r["Instances"]]


# -- a run from launch to fetch -----------------------------------------------------------------


def test_a_run_boots_syncs_while_running_ends_and_is_fetched(ec2_cfg, aws, play):
    ec2_cfg["AWS_SPOT_PRICE"] = 0.5
    started = time.monotonic()
    job = run_experiment(jobfns.wait_for_release, variant={"tag": "a"}, exp_name="x",
                         mode="ec2", use_gpu=True, config=ec2_cfg)
    assert time.monotonic() - started < 15
    assert job.status() is JobState.QUEUED
    backend = job.launch_info["backend"]
    instance = describe(aws, backend["instance_id"])
    assert instance["InstanceType"] == "g4dn.xlarge"  # the GPU type, since use_gpu=True
    assert instance["InstanceLifecycle"] == "spot" and "spot_request_id" in backend
    assert instance["IamInstanceProfile"]["Arn"].endswith(PROFILE)
    assert tags(aws, backend["instance_id"])["easylaunch:exp"] == "x"
    shutdown = aws.ec2.describe_instance_attribute(
        InstanceId=backend["instance_id"], Attribute="instanceInitiatedShutdownBehavior")
    assert shutdown["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"

    box = play(job)
    assert len(box.user_data.encode()) < 4096 and "function.pkl" not in box.user_data
    result = check_a_synced_run(job, box, lambda k: s3_text(aws, k), lambda p: s3_keys(aws, p))
    assert result["gpu"] is True and result["tag"] == "a"
    assert box.wait() == 0
    assert box.shutdown_log.read_text() == "shutdown -h now\n"
    assert describe(aws, backend["instance_id"])["State"]["Name"] == "terminated"
    assert tags(aws, backend["instance_id"])["easylaunch:runs"] == job.id
    assert tags(aws, backend["instance_id"])["easylaunch:agent"] == "done"
    assert box.imds.calls[0] == ("PUT", "/latest/api/token") and box.imds.refused == 0
    assert ("GET", "/latest/meta-data/spot/instance-action") in box.imds.calls
    assert s3_state(aws, job) == "succeeded"

    assert not (job.log_dir / "progress.txt").exists()
    assert "fetched" in job.fetch()
    assert (job.log_dir / "progress.txt").read_text() == "halfway\n"
    assert "started a" in (job.log_dir / "stdout.log").read_text()
    assert json.loads((job.log_dir / "agent.json").read_text())["final"] is True
    # from a later process: status, result and fetch
    (job.log_dir / "stdout.log").unlink()
    later = subprocess.run(
        [sys.executable, "-c", "import sys; from easylaunch import Job; "
         "j = Job.from_run_dir(sys.argv[1]); "
         "print(j.status(), j.result()['tag'], j.fetch())",
         str(job.log_dir)], capture_output=True, text=True, timeout=60)
    assert later.stdout.startswith("succeeded a fetched"), later.stderr
    assert "started a" in (job.log_dir / "stdout.log").read_text()
    # no credentials anywhere: user-data, every object in S3, the sandbox and the run folder
    texts = [box.user_data] + [aws.s3.get_object(Bucket=aws.bucket, Key=k)["Body"].read()
                               .decode("latin-1") for k in s3_keys(aws)]
    assert_no_secrets(texts, [box.root, job.log_dir], list(KEYS))


def test_a_failing_function_ends_failed_with_its_traceback_in_s3(ec2_cfg, aws, play):
    job = run_experiment(jobfns.fail, variant={"learning_rate": 5}, mode="ec2",
                         config=ec2_cfg)
    box = play(job)
    assert job.wait(timeout=60) is JobState.FAILED, box.boot_log()
    prefix = job.launch_info["backend"]["log_prefix"]
    status = json.loads(s3_text(aws, f"{prefix}/status.json"))
    assert status["state"] == "failed"
    assert "ValueError: bad learning rate 5" in status["error"]
    assert "Traceback" in s3_text(aws, f"{prefix}/stderr.log")
    with pytest.raises(ValueError, match="bad learning rate 5"):
        job.result()
    assert box.wait() == 0 and box.shutdown_log.exists()


def test_a_command_runs_on_an_instance_and_its_exit_code_decides(ec2_cfg, aws, play):
    jobs = run_commands(["bash -c 'echo fine on $(hostname -s)'",
                         "bash -c 'echo gone >&2; exit 3'"], exp_name="cmds", mode="ec2",
                        config=ec2_cfg)
    boxes = [play(job) for job in jobs]
    ok, bad = jobs
    assert ok.wait(timeout=60) is JobState.SUCCEEDED, boxes[0].boot_log()
    assert bad.wait(timeout=60) is JobState.FAILED, boxes[1].boot_log()
    assert bad.info()["exit_code"] == 3 and bad.info()["error"].endswith("gone")
    prefix = ok.launch_info["backend"]["log_prefix"]
    assert s3_text(aws, f"{prefix}/stdout.log").startswith("fine on ")


def test_a_spot_interruption_notice_triggers_the_final_sync(ec2_cfg, aws, play):
    ec2_cfg["AWS_SYNC_INTERVAL_SECONDS"] = 3600.0  # no periodic sync during the test
    job = run_experiment(jobfns.wait_for_release, mode="ec2", config=ec2_cfg)
    box = play(job)
    prefix = job.launch_info["backend"]["log_prefix"]
    assert wait_for(lambda: (box.run_dir(job) / "progress.txt").exists(), 30), box.boot_log()
    assert wait_for(lambda: s3_state(aws, job) == "running", 10)
    time.sleep(1.0)  # several agent polls: status syncs, but not the other files
    assert s3_text(aws, f"{prefix}/progress.txt") is None
    box.imds.announce_spot_interruption()
    # one sync uploads the run's files one after another, then agent.json: wait for the last
    assert wait_for(lambda: json.loads(s3_text(aws, f"{prefix}/agent.json") or "{}")
                    .get("spot_notice"), 10)
    assert s3_text(aws, f"{prefix}/progress.txt") == "halfway\n"
    assert "started" in s3_text(aws, f"{prefix}/stdout.log")
    box.release(job)
    assert job.wait(timeout=60) is JobState.SUCCEEDED


# -- restarts: a new instance takes up the run -------------------------------------------------


def test_a_spot_interruption_relaunches_the_run_once_and_it_resumes_from_its_checkpoint(
        ec2_cfg, aws, play, exp):
    job = launch_and_exit(ec2_cfg, "ec2", exp,
                          {"steps": 40, "step_seconds": 0.1, "every": 5})
    first = play(job)
    assert wait_for(lambda: len(jobfns.steps_done(first.run_dir(job))) >= 8, 60), \
        first.boot_log()
    first.imds.announce_spot_interruption()
    # the run checkpoints at the notice, records the stop and syncs; the instance ends itself
    assert first.wait() == 0 and s3_state(aws, job) == "queued", first.boot_log()
    stopped_at = jobfns.steps_done(first.run_dir(job))[-1][1]
    # two later processes look at the same moment (the launcher is gone): one relaunches
    watchers = [subprocess.Popen([sys.executable, "-m", "easylaunch.cli", "watch", "--once"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(2)]
    said = [w.communicate(timeout=120) for w in watchers]
    assert all(w.returncode == 0 for w in watchers), said
    assert sum("starts again on instance" in err for _, err in said) == 1, said
    assert len(instances_of(aws, exp)) == 2
    backend = job.launch_info["backend"]
    assert backend["earlier_instances"] == [first.id] != [backend["instance_id"]]
    second = play(job)
    assert job.wait(timeout=120) is JobState.SUCCEEDED, second.boot_log()
    result = job.result()
    assert result["attempt"] == 2 and result["resumed_from"] == stopped_at
    # the new instance took up the log of the first: each step once, across the two attempts
    steps = jobfns.steps_done(second.run_dir(job))
    assert [step for _, step in steps] == list(range(1, 41))
    assert {attempt for attempt, step in steps if step > stopped_at} == {2}
    [restart] = job.info()["restarts"]
    assert restart["reason"] == "preempted" and restart["attempt"] == 1
    assert describe(aws, first.id)["State"]["Name"] == "terminated"


def test_a_killed_run_process_starts_again_on_the_same_instance(ec2_cfg, aws, play, exp):
    job = launch_and_exit(ec2_cfg, "ec2", exp, {"steps": 30, "step_seconds": 0.1, "every": 5})
    box = play(job)
    status = box.run_dir(job) / "status.json"
    assert wait_for(lambda: len(jobfns.steps_done(box.run_dir(job))) >= 7, 60), box.boot_log()
    os.kill(json.loads(status.read_text())["pid"], signal.SIGKILL)  # out of memory, say
    assert job.wait(timeout=60) is JobState.SUCCEEDED, box.boot_log()
    result = job.result()
    assert result["attempt"] == 2 and result["resumed_from"] >= 5
    assert [r["reason"] for r in job.info()["restarts"]] == ["lost"]
    assert len(instances_of(aws, exp)) == 1 and box.wait() == 0


def test_a_run_cancelled_while_it_waits_for_a_new_instance_is_not_relaunched(
        ec2_cfg, aws, play, exp):
    job = launch_and_exit(ec2_cfg, "ec2", exp, {"steps": 400, "step_seconds": 0.1})
    box = play(job)
    assert wait_for(lambda: jobfns.steps_done(box.run_dir(job)), 60), box.boot_log()
    box.imds.announce_spot_interruption()
    assert box.wait() == 0 and s3_state(aws, job) == "queued"
    job.cancel()
    assert job.status() is JobState.CANCELLED
    assert len(instances_of(aws, exp)) == 1


def test_a_lost_instance_is_relaunched_and_used_up_restarts_end_the_run(ec2_cfg, aws, play, exp):
    job = launch_and_exit(ec2_cfg, "ec2", exp,
                          {"steps": 400, "step_seconds": 0.1, "every": 5})
    boxes = [play(job)]
    for attempt in (1, 2, 3):  # max_restarts=2: the third loss ends the run
        box = boxes[-1]
        assert wait_for(lambda n=attempt: s3_status(aws, job).get("attempt") == n, 60), \
            box.boot_log()
        box.stop()  # the machine is gone at once: no notice, no last sync
        aws.ec2.terminate_instances(InstanceIds=[box.id])
        state = job.status()
        if attempt < 3:
            assert state is JobState.QUEUED and job.info()["attempt"] == attempt
            boxes.append(play(job))
    assert state is JobState.FAILED
    info = job.info()
    assert [r["reason"] for r in info["restarts"]] == ["lost", "lost"]
    assert "ended (" in info["error"] and "max_restarts=2 used up" in info["error"]
    assert len(instances_of(aws, exp)) == 3


# -- sweeps: uploads once per content, several runs per instance --------------------------------


def test_a_sweep_uploads_each_snapshot_once_and_packs_runs_per_instance(
        ec2_cfg, aws, play, monkeypatch):
    uploaded = []
    real_upload = S3Store.put_bytes
    monkeypatch.setattr(S3Store, "put_bytes",
                        lambda self, key, data: (uploaded.append(key),
                                                 real_upload(self, key, data))[1])
    jobs = run_sweep(jobfns.quick, [{"tag": i} for i in range(3)], exp_name="sw",
                     mode="ec2", config=ec2_cfg, num_exps_per_instance=2)
    kinds = [k.split("/")[1] for k in uploaded]
    assert kinds.count("snapshots") == 1 and kinds.count("bundles") == 1  # (one archive a fleet)
    assert kinds.count("manifests") == 1 and kinds.count("agent") == 1
    ids = [j.launch_info["backend"]["instance_id"] for j in jobs]
    assert ids[0] == ids[1] != ids[2] and len(instances_of(aws, "sw")) == 2
    boxes = [play(iid) for iid in dict.fromkeys(ids)]
    results = [j.result(timeout=60) for j in jobs]
    assert [r["tag"] for r in results] == [0, 1, 2]
    assert all(r["module_file"].startswith(str(aws.sandbox)) for r in results)
    assert all(b.wait() == 0 and b.shutdown_log.exists() for b in boxes)
    uploaded.clear()  # the same code again: its snapshot is already in S3
    run_sweep(jobfns.quick, [{"tag": 9}], exp_name="sw", mode="ec2", config=ec2_cfg)
    assert [k.split("/")[1] for k in uploaded] == ["bundles", "manifests"]


# -- cancel and lost instances ------------------------------------------------------------------


def test_cancel_stops_the_run_syncs_it_and_terminates_the_instance(ec2_cfg, aws, play):
    job = run_experiment(jobfns.wait_for_release, mode="ec2", config=ec2_cfg)
    box = play(job)
    assert wait_for(lambda: s3_state(aws, job) == "running", 30), box.boot_log()
    job.cancel()
    assert job.status() is JobState.CANCELLED
    assert s3_state(aws, job) == "cancelled"  # recorded by the run itself, then synced
    assert "SIGTERM" in job.info()["error"]
    iid = job.launch_info["backend"]["instance_id"]
    assert describe(aws, iid)["State"]["Name"] == "terminated"
    assert box.wait() == 0


def test_cancel_before_the_instance_booted_terminates_it_at_once(ec2_cfg, aws):
    job = run_experiment(jobfns.quick, mode="ec2", config=ec2_cfg)
    started = time.monotonic()
    job.cancel()
    assert time.monotonic() - started < 10
    assert job.status() is JobState.CANCELLED
    assert describe(aws, job.launch_info["backend"]["instance_id"])["State"]["Name"] == \
        "terminated"
    assert job.launch_info["backend"]["cancel_key"] in s3_keys(aws, "exps/control/")


def test_a_run_whose_instance_vanished_ends_as_failed(ec2_cfg, aws):
    job = run_experiment(jobfns.quick, mode="ec2", config=ec2_cfg)
    assert job.status() is JobState.QUEUED
    aws.ec2.terminate_instances(InstanceIds=[job.launch_info["backend"]["instance_id"]])
    assert job.wait(timeout=20) is JobState.FAILED
    assert "recorded no outcome" in job.info()["error"]


# -- the question before paid instances start ---------------------------------------------------


def test_an_interactive_launch_asks_once_per_sweep(ec2_cfg, aws, monkeypatch, capsys):
    asked = fake_terminal(monkeypatch, ["n", "y"])
    with pytest.raises(LaunchError, match="declined"):
        run_sweep(jobfns.quick, [{}, {}, {}], exp_name="ask", mode="ec2", config=ec2_cfg)
    assert "3 c5.large on-demand instance(s)" in capsys.readouterr().err
    assert not instances_of(aws, "ask") and not s3_keys(aws)
    assert not (Path(ec2_cfg["LOCAL_LOG_DIR"]) / "ask").exists()
    ec2_cfg["AWS_SPOT_PRICE"] = 0.25
    jobs = run_sweep(jobfns.quick, [{}, {}, {}], exp_name="ask", mode="ec2",
                     config=ec2_cfg, num_exps_per_instance=2)
    assert "2 c5.large spot (max $0.25/hour each) instance(s)" in capsys.readouterr().err
    assert len(asked) == 2 and len(jobs) == 3 and len(instances_of(aws, "ask")) == 2
    run_experiment(jobfns.quick, exp_name="ask", mode="ec2", config=ec2_cfg, confirm=False)
    assert len(asked) == 2


def test_a_non_interactive_launch_does_not_ask(ec2_cfg, aws, monkeypatch):
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False, raising=False)
    monkeypatch.setattr("builtins.input", lambda prompt="": pytest.fail("asked: " + prompt))
    job = run_experiment(jobfns.quick, exp_name="quiet", mode="ec2", config=ec2_cfg)
    assert len(instances_of(aws, "quiet")) == 1 and job.status() is JobState.QUEUED


# -- bad input: refused before anything starts --------------------------------------------------


def _nothing_started(aws, cfg, exp_name: str) -> None:
    assert not instances_of(aws, exp_name)
    assert not s3_keys(aws, "exps/logs/") and not s3_keys(aws, "exps/control/")
    runs = list((Path(cfg["LOCAL_LOG_DIR"]) / exp_name).glob("*_*"))
    assert all(json.loads((r / "status.json").read_text())["state"] == "failed" for r in runs)


@pytest.mark.parametrize("change, message", [
    ({"AWS_S3_PATH": None}, "AWS_S3_PATH must look like s3://bucket/prefix"),
    ({"AWS_S3_PATH": "my-bucket/exps"}, "AWS_S3_PATH must look like"),
    ({"AWS_S3_PATH": "s3://no-such-bucket-easylaunch/exps"}, "does not exist"),
    ({"AWS_REGION": "mars-north-1"}, "region 'mars-north-1' is unknown"),
    ({"AWS_IMAGE_IDS": {}}, "AWS_IMAGE_IDS has no image for region 'us-east-1'"),
    ({"AWS_IMAGE_IDS": {REGION: "ami-0123456789abcdef0"}}, "'ami-0123456789abcdef0' is not known"),
    ({"AWS_INSTANCE_TYPE": "zz9.plural"}, "AWS_INSTANCE_TYPE.*'zz9.plural' is not known"),
    ({"AWS_SECURITY_GROUP_IDS": ["sg-0000000f"]}, "AWS_SECURITY_GROUP_IDS"),
    ({"AWS_IAM_INSTANCE_PROFILE": None}, "AWS_IAM_INSTANCE_PROFILE is not set"),
    ({"AWS_SYNC_INTERVAL_SECONDS": 0}, "AWS_SYNC_INTERVAL_SECONDS must be more than 0"),
])
def test_bad_settings_are_refused_before_anything_is_made(ec2_cfg, aws, change, message, exp):
    with pytest.raises(EasyLaunchError, match=message):
        run_experiment(jobfns.quick, exp_name=exp, mode="ec2",
                       config=dict(ec2_cfg, **change))
    assert not (Path(ec2_cfg["LOCAL_LOG_DIR"]) / exp).exists()
    _nothing_started(aws, ec2_cfg, exp)


def test_no_credentials_is_a_clear_error(ec2_cfg, aws, monkeypatch, exp):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(LaunchError, match="no AWS credentials found: run 'aws configure'"):
        run_experiment(jobfns.quick, exp_name=exp, mode="ec2", config=ec2_cfg)
    assert not (Path(ec2_cfg["LOCAL_LOG_DIR"]) / exp).exists()


def test_an_unreachable_endpoint_is_a_clear_error(ec2_cfg, aws, monkeypatch, exp):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    with pytest.raises(LaunchError, match="cannot reach AWS in us-east-1"):
        run_experiment(jobfns.quick, exp_name=exp, mode="ec2", config=ec2_cfg)
    assert not (Path(ec2_cfg["LOCAL_LOG_DIR"]) / exp).exists()


def test_a_bundle_over_the_object_size_limit_is_refused_before_uploading(
        ec2_cfg, aws, monkeypatch, exp, tmp_path):
    monkeypatch.setattr(cloud, "MAX_OBJECT_BYTES", 64 * 1024)  # S3's is 5 GiB: simulated
    code = tmp_path / "code"  # a code folder well below the limit: only the variant is over
    code.mkdir()
    shutil.copy(jobfns.__file__, code)
    ec2_cfg["CODE_DIRS_TO_MOUNT"] = [str(code)]
    with pytest.raises(LaunchError, match="the bundles of run .*: .* MB packed, more than"):
        run_experiment(jobfns.quick, variant={"blob": os.urandom(128 * 1024).hex()},
                       exp_name=exp, mode="ec2", config=ec2_cfg)
    assert not s3_keys(aws)
    _nothing_started(aws, ec2_cfg, exp)


def test_an_instance_that_fails_to_start_leaves_nothing_running(ec2_cfg, aws, exp):
    ec2_cfg["AWS_IAM_INSTANCE_PROFILE"] = "no-such-profile"  # EC2 refuses it at run_instances
    with pytest.raises(LaunchError, match="EC2 did not start 1 c5.large on-demand instance"):
        run_experiment(jobfns.quick, exp_name=exp, mode="ec2", config=ec2_cfg)
    runs = list((Path(ec2_cfg["LOCAL_LOG_DIR"]) / exp).glob("*_*"))
    assert len(runs) == 1
    assert "instance_id" not in json.loads((runs[0] / "launch.json").read_text())["backend"]
    _nothing_started(aws, ec2_cfg, exp)


def test_a_batch_that_fails_after_another_started_terminates_the_first(
        ec2_cfg, aws, monkeypatch):
    monkeypatch.setattr(ec2_mode.Ec2Mode, "max_instances_per_batch", 1)
    real_args = ec2_mode.Ec2Mode.run_instances_args
    calls = []

    def second_names_a_missing_profile(self, request, target, fleet):
        args = real_args(self, request, target, fleet)
        calls.append(args)
        if len(calls) == 2:
            args["IamInstanceProfile"] = {"Name": "no-such-profile"}  # EC2 refuses it
        return args

    monkeypatch.setattr(ec2_mode.Ec2Mode, "run_instances_args", second_names_a_missing_profile)
    with pytest.raises(LaunchError, match="EC2 did not start"):
        run_sweep(jobfns.quick, [{}, {}], exp_name="half", mode="ec2", config=ec2_cfg)
    first = instances_of(aws, "half")
    assert len(calls) == 2 and len(first) == 1 and first[0]["State"]["Name"] == "terminated"
    runs = list((Path(ec2_cfg["LOCAL_LOG_DIR"]) / "half").glob("*_*"))
    assert {json.loads((r / "status.json").read_text())["state"] for r in runs} == {"failed"}
    assert not s3_keys(aws, "exps/logs/")
    assert len(s3_keys(aws, "exps/control/")) == 1  # the started run is marked cancelled too


def test_the_boot_script_quotes_what_it_is_given_and_stays_short(tmp_path):
    spec = cloud.BootSpec(cloud="aws", store="s3", python="/opt/my python/bin/python3",
                          pip_requirements=("boto3", "cloudpickle==3.1.1", "x; touch pwned"),
                          bucket="b", region=REGION, agent_key="p/agent/$(touch pwned).py",
                          manifest_key="p/m's.json")
    script = cloud.boot_script(spec)
    assert "'/opt/my python/bin/python3' -m pip install --quiet boto3" in script
    assert "'x; touch pwned'" in script and "'p/agent/$(touch pwned).py'" in script
    assert subprocess.run(["bash", "-n", "-c", script]).returncode == 0
    with pytest.raises(LaunchError, match="shorten the pip requirements list"):
        cloud.boot_script(cloud.BootSpec(**dict(spec.__dict__,
                                                pip_requirements=("numpy",) * 2000)))


def test_a_dry_run_counts_instances_prices_spot_and_starts_nothing(ec2_cfg, aws, exp):
    shown = run_sweep(jobfns.train, [dict(seed=s) for s in range(5)], mode="ec2", exp_name=exp,
                      config=dict(ec2_cfg, AWS_SPOT_PRICE=0.25), num_exps_per_instance=2,
                      dry_run=True)
    assert shown.runs == 5 and shown.where == f"ec2 {REGION}"
    assert shown.resources["instances"] == 3 and shown.resources["runs per instance"] == 2
    assert shown.resources["price"] == "at most $0.75/hour (3 x $0.25)"
    (boot,) = shown.files.values()
    assert boot.startswith("#!") and aws.bucket in boot
    assert KEYS[0] not in str(shown) and KEYS[1] not in str(shown)  # no credentials shown
    assert not instances_of(aws, exp) and not s3_keys(aws)
    assert not (Path(ec2_cfg["LOCAL_LOG_DIR"]) / exp).exists()

"""Git infos: gathered with GitPython, once per repository, never a crash."""

import subprocess
import sys

import jobfns

from easylaunch import run_experiment, run_sweep
from easylaunch.runs import gitinfo


def _repo(path):
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.email=t@e", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    (path / "mod.py").write_text("a = 1\n")
    subprocess.run(git + ["add", "mod.py"], check=True)
    subprocess.run(git + ["commit", "-qm", "first"], check=True)
    (path / "mod.py").write_text("a = 2\n")  # unstaged change
    (path / "new.py").write_text("b = 1\n")
    subprocess.run(git + ["add", "new.py"], check=True)  # staged change
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True)
    return head.stdout.strip()


def test_git_infos_reach_the_function_and_the_run_folder(cfg, tmp_path):
    commit = _repo(tmp_path / "repo")
    plain = tmp_path / "plain"
    plain.mkdir()
    cfg["CODE_DIRS_TO_MOUNT"] = [str(tmp_path / "repo"), str(plain), cfg["CODE_DIRS_TO_MOUNT"][0]]
    job = run_experiment(jobfns.echo, config=cfg)
    infos = job.result(timeout=60)["config"]["git_infos"]
    repo_info = [i for i in infos if i[0] == str(tmp_path / "repo")]
    assert len(repo_info) == 1
    directory, diff, staged, commit_hash, branch = repo_info[0]
    assert "-a = 1" in diff and "+a = 2" in diff
    assert "+b = 1" in staged
    assert commit_hash == commit and branch == "main"
    assert not [i for i in infos if i[0] == str(plain)]  # not a repository: no entry
    assert "+a = 2" in (job.log_dir / "git/0-repo.diff").read_text()
    assert "+b = 1" in (job.log_dir / "git/0-repo.staged.diff").read_text()
    assert job.launch_info["git_commits"][str(tmp_path / "repo")] == commit


def test_gathered_once_per_process_per_repository(cfg, tmp_path, monkeypatch):
    _repo(tmp_path / "repo")
    calls = []
    real = gitinfo._read_repo
    monkeypatch.setattr(gitinfo, "_read_repo", lambda d: calls.append(d) or real(d))
    monkeypatch.setattr(gitinfo, "_by_repo", {})
    cfg["CODE_DIRS_TO_MOUNT"] = [str(tmp_path / "repo")]
    run_sweep(jobfns.train, [{}] * 5, config=cfg, mode="here_no_doodad")
    for _ in range(3):
        run_experiment(jobfns.train, config=cfg, mode="here_no_doodad")
    assert calls.count(str(tmp_path / "repo")) == 1
    assert len(calls) == len(set(calls))  # (the launching script's folder, once too)


def test_a_script_in_a_repository_records_its_commit_without_code_folders(tmp_path):
    commit = _repo(tmp_path / "repo")
    script = tmp_path / "repo" / "launch.py"
    script.write_text(
        "from easylaunch import run_experiment\n"
        "job = run_experiment(print, exp_name='from-repo', mode='local', config={\n"
        f"    'LOCAL_LOG_DIR': {str(tmp_path / 'logs')!r}, 'CODE_DIRS_TO_MOUNT': [],\n"
        f"    'REGISTRY_PATH': {str(tmp_path / 'registry.sqlite3')!r}}})\n"
        "job.wait(timeout=60)\n"
        "print(job.launch_info['git_commits'])\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == repr({str(tmp_path / "repo"): commit})


def test_no_git_binary_means_no_entry_and_no_crash(tmp_path):
    _repo(tmp_path / "repo")
    repo = str(tmp_path / "repo")
    code = f"from easylaunch.runs.gitinfo import git_infos; print(git_infos([{repo!r}]))"
    out = subprocess.run([sys.executable, "-c", code], env={"PATH": "/nonexistent"},
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"

"""Git state of the code directories, gathered with GitPython once per process per repository."""

from __future__ import annotations

import os
from collections.abc import Iterable

from easylaunch_job.config import GitInfo

_by_repo: dict[str, tuple[str, GitInfo] | None] = {}  # folder -> its repository's root, info


def _read_repo(directory: str) -> tuple[str, GitInfo] | None:
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")  # no git binary: no entry, no crash
    try:
        import git

        repo = git.Repo(directory, search_parent_directories=True)
        try:
            commit = repo.head.commit.hexsha
        except ValueError:  # a repository without commits
            commit = None
        try:
            branch = repo.active_branch.name
        except TypeError:  # detached HEAD
            branch = None
        return str(repo.working_tree_dir), GitInfo(
            directory=directory,
            code_diff=repo.git.diff(None),
            code_diff_staged=repo.git.diff("--staged"),
            commit_hash=commit,
            branch_name=branch,
        )
    except Exception:  # noqa: BLE001 - not a repository, no git binary, unreadable: no entry
        return None


def git_infos(directories: Iterable[str]) -> list[GitInfo]:
    """GitInfo for every directory that is inside a git repository, one per repository (the
    first directory naming it; cached per directory)."""
    infos: dict[str, GitInfo] = {}
    for directory in directories:
        directory = os.path.abspath(directory)
        if directory not in _by_repo:
            _by_repo[directory] = _read_repo(directory)
        found = _by_repo[directory]
        if found is not None:
            root, info = found
            infos.setdefault(root, info)
    return list(infos.values())

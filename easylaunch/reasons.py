"""Why a run ended as it did, in one line: what ``ls``, the registry, the dashboard and
``load_sweep`` show next to an ended run that did not succeed."""

from __future__ import annotations

REASON_CHARS = 200  # a longer reason is cut


def reason_of(status: dict) -> str | None:
    """One line from a run's status.json: the exception (type and message) of a traceback,
    else the first line of the recorded error, else what the exit says; None for a run that
    succeeded or has not ended."""
    state = status.get("state")
    if state in (None, "queued", "running", "succeeded"):
        return None
    error = str(status.get("error") or "").strip()
    lines = [line for line in error.splitlines() if line.strip()]
    if lines and lines[0].startswith("Traceback (most recent call last)"):
        # the exception's own line: the last one that is not a frame (indented) or a note
        text = next((line for line in reversed(lines) if not line[:1].isspace()), lines[-1])
    elif lines:
        text = lines[0]
    elif status.get("signal"):
        text = f"ended by {status['signal']}"
    elif status.get("exit_code") not in (None, 0):
        text = f"exited with code {status['exit_code']}"
    else:
        text = {"timeout": "its time limit came", "cancelled": "cancelled"}.get(state, state)
    text = text.strip()
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 1] + "…"

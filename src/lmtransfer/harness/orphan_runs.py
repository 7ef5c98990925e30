"""Runs whose process died: a stage killed by kill -9 or a power cut runs no code to close its run, which the
store would show RUNNING for ever, and the pipeline run it owned with it.

Each stage run and pipeline run is tagged with the process that owns it (PROCESS_TAG: host, pid, start time).
When any stage starts, the runs still RUNNING whose process is gone are marked KILLED (`close_orphaned_runs`).
"""

from __future__ import annotations

from lmtransfer.harness.run_tags import PARENT_TAG, TAG_PREFIX

PROCESS_TAG = f"{TAG_PREFIX}process"  # host:pid:start, to recognise a run whose process died


def process_tag() -> str:
    """'host:pid:start time' of this process: enough to tell later whether it is still alive."""
    import socket

    import psutil

    process = psutil.Process()
    return f"{socket.gethostname()}:{process.pid}:{int(process.create_time())}"


def is_alive(tag: str) -> bool:
    """Whether the process a run was tagged with still runs (on another host: assumed alive)."""
    import socket

    import psutil

    try:
        host, pid, started = tag.rsplit(":", 2)
        if host != socket.gethostname():
            return True
        return int(psutil.Process(int(pid)).create_time()) == int(started)
    except (ValueError, psutil.Error):
        return False


def close_orphaned_runs(client, experiment_id: str, run_name: str) -> list[str]:
    """Stage runs still RUNNING although their process is gone (killed, power cut) are marked KILLED: this stage's,
    and every other stage's too, since a stage DVC restores from its run-cache runs no code to close its own.

    Called when any stage starts; returns the ids of this stage's, so the new run can link to them.
    """
    orphans = [run for run in running_stage_runs(client, experiment_id)
               if not is_alive(run.data.tags.get(PROCESS_TAG, ""))]
    for run in orphans:
        _mark_killed(client, run.info.run_id)
        parent_id = run.data.tags.get(PARENT_TAG)
        if parent_id:
            parent = client.get_run(parent_id)
            if parent.info.status == "RUNNING" and not is_alive(parent.data.tags.get(PROCESS_TAG, "")):
                client.set_terminated(parent_id, status="KILLED")  # its pipeline stopped with it
    # A pipeline run is RUNNING while a stage owns it (PROCESS_TAG); a kill just after that stage closed its own
    # run leaves it RUNNING with no stage to find it by, so it is found by its owner's process.
    pipelines = client.search_runs(
        [experiment_id], filter_string=f"attributes.status = 'RUNNING' and tags.`{TAG_PREFIX}kind` = 'pipeline'",
    )
    for run in pipelines:
        if PROCESS_TAG in run.data.tags and not is_alive(run.data.tags[PROCESS_TAG]):
            _mark_killed(client, run.info.run_id)
    return [run.info.run_id for run in orphans if run.info.run_name == run_name]


def running_stage_runs(client, experiment_id: str, parent_id: str | None = None) -> list:
    """Stage runs the store marks RUNNING (those of one pipeline run, when given), alive or not."""
    of_parent = f" and tags.`{PARENT_TAG}` = '{parent_id}'" if parent_id else ""
    return client.search_runs(
        [experiment_id], filter_string=f"attributes.status = 'RUNNING' and tags.`{TAG_PREFIX}kind` = 'stage'{of_parent}")


def _mark_killed(client, run_id: str) -> None:
    client.set_terminated(run_id, status="KILLED")
    client.set_tag(run_id, f"{TAG_PREFIX}note", "its process ended without closing the run")

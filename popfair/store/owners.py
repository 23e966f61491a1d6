"""Who holds a claim, and whether it still lives: the owner id names the host (name and boot id)
and the process, so a claim of a process of this host that has died is taken over at once, while a
claim of another host is only known dead when its lease runs out. Used by the response cache's
claims (no answer paid twice) and the blob stores' (no document rendered twice at once)."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path


def _host_id() -> str:
    """This machine: its name and, where Linux tells it, its boot id (two machines that happen to share
    a host name, or one machine before and after a reboot, are different hosts)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:8]
    except OSError:
        boot = ""
    return f"{socket.gethostname()}#{boot}" if boot else socket.gethostname()


HOST_ID = _host_id()


def new_owner() -> str:
    """Who holds a claim: host, process id and a random part (one per engine run)."""
    return f"{HOST_ID}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def owner_is_dead(owner: str) -> bool:
    """True when `owner` is a process of this host that no longer runs (exited, killed, or a zombie
    waiting to be reaped). Owners on other hosts, and unreadable owners, are never called dead here:
    for them the lease rule decides."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != HOST_ID or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    try:  # a killed process its parent has not reaped yet still has a pid
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False

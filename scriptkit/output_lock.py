"""One training run per output directory: the lock file that a training
run holds in its --output_dir from its first write to its end.

In: the run's --output_dir (and TF_CONFIG, for which process of a cluster
holds the lock). Out: <output_dir>/training.lock, refreshed while the run
lives and removed at its end; an InputError naming the other run when a
live one holds it. Needs no TensorFlow (remote directories go through
tf.io.gfile).
"""

import atexit
import contextlib
import functools
import json
import os
import socket
import sys
import threading
import time
import uuid

from scriptkit import file_io
from scriptkit import logs
from scriptkit.errors import InputError


# A training run holds <output_dir>/training.lock (JSON: host, pid, process
# start, start time, command, a random token, the time of its last refresh)
# from its first write to its end. Two runs training into one directory
# would overwrite each other's checkpoints and records; evaluation and
# prediction runs only read the checkpoints and take no lock.

LOCK_FILE = "training.lock"
# A held lock is rewritten this often (its heartbeat): a lock of another
# host counts as left behind by a dead run once it has gone unrefreshed for
# LOCK_STALE_SECONDS. (The hosts' clocks are compared: they must agree to
# well within that.)
LOCK_HEARTBEAT_SECONDS = 60
LOCK_STALE_SECONDS = 5 * LOCK_HEARTBEAT_SECONDS

_HELD_LOCKS = {}  # lock path -> _HeldLock, the locks this process holds


class _HeldLock:
    """A lock this process holds, with the thread that refreshes it."""

    def __init__(self, path, content):
        self.path = path
        self.content = content
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._heartbeat, daemon=True,
                                       name="training-lock-heartbeat")

    def _heartbeat(self):
        while not self.stop.wait(LOCK_HEARTBEAT_SECONDS):
            try:
                holder = _read_lock(self.path)[1]
                if not holder or holder.get("token") != self.content["token"]:
                    logs.log_warning("%s no longer names this run (another run took it over); "
                                     "it is not refreshed any more", self.path)
                    return
                self.content["refreshed"] = time.time()
                with file_io.atomic_output(self.path) as f:
                    f.write(json.dumps(self.content, indent=2) + "\n")
            except Exception as e:  # A failed refresh is retried at the next beat.
                logs.log_warning("Could not refresh %s: %s", self.path, e)


def _process_start(pid):
    """The start time of process `pid` in clock ticks since boot (Linux
    /proc), which tells a live process from a later one that got the same
    pid; None where unknown."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            # The command name (field 2) may hold spaces: count from its ")".
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _pid_alive(pid):
    """Whether a process with the id `pid` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # Another user's process.
        return True
    return True


def _boot_id():
    """The id of this boot of the machine's kernel (Linux), which tells two
    machines, or two boots of one, that share a host name; None where
    unknown."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _pid_namespace():
    """The inode of this process's PID namespace (Linux): containers that
    share a host name (--network=host, the same --hostname) but not their
    process ids differ in it; None where unknown."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _same_host(holder):
    """Whether the lock content `holder` was written where this process can
    see the holder's process by its pid: the same host name, boot and PID
    namespace. A lock without the last two (written by an earlier version)
    counts as of another host."""
    return (holder.get("host") == socket.gethostname()
            and holder.get("boot_id") == _boot_id()
            and holder.get("pid_namespace") == _pid_namespace())


def _read_lock(path):
    """(raw bytes, parsed content) of the lock file `path`: (None, None) if
    there is none, (bytes, {}) if it is not a lock's JSON object."""
    try:
        raw = file_io.read_file_bytes(path)
    except Exception:  # Missing (OSError locally, NotFoundError remote) or unreadable.
        if not file_io.exists(path):
            return None, None
        raise
    try:
        content = json.loads(raw.decode("utf-8"))
    except ValueError:
        return raw, {}
    return raw, content if isinstance(content, dict) else {}


def _lock_is_live(holder):
    """Whether the run named by the lock content `holder` still runs: on
    this host (`_same_host`), its process (same pid and start) exists; on
    another, it refreshed the lock within LOCK_STALE_SECONDS."""
    if _same_host(holder):
        pid = holder.get("pid")
        if pid == os.getpid():
            return any(lock.content["token"] == holder.get("token")
                       for lock in _HELD_LOCKS.values())
        if not isinstance(pid, int) or pid <= 0 or not _pid_alive(pid):
            return False
        start = holder.get("process_start")
        return start is None or _process_start(pid) in (None, start)
    refreshed = holder.get("refreshed")
    return (isinstance(refreshed, (int, float))
            and time.time() - refreshed < LOCK_STALE_SECONDS)


def _describe_holder(holder):
    return "pid %s on host %s, started %s" % (holder.get("pid"), holder.get("host"),
                                              holder.get("started_at"))


def _create_exclusively(path, data):
    """Creates the file `path` with `data` (bytes) unless it exists, so that
    of two runs racing for it at most one succeeds (see lock_output_dir for
    remote stores). Returns whether this call created it."""
    # Not named `path` + suffix: TensorFlow's ram:// file system counts any
    # name that starts with `path` as `path` existing.
    tmp_path = os.path.join(os.path.dirname(path),
                            ".%s.tmp-%d" % (os.path.basename(path), os.getpid()))
    with file_io.open_file(tmp_path, "wb") as f:
        f.write(data)
    try:
        if file_io.is_remote(path):
            try:
                file_io.gfile().rename(tmp_path, path, overwrite=False)
                return True
            except Exception:  # AlreadyExistsError
                if file_io.exists(path):
                    return False
                raise
        try:
            # A hard link appears complete, and fails if `path` exists.
            os.link(tmp_path, path)
            return True
        except FileExistsError:
            return False
        except OSError:  # No hard links on this file system: an exclusive create.
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return True
    finally:
        _remove(tmp_path)


def _remove(path):
    """Removes the file `path` if it exists."""
    if file_io.is_remote(path):
        if file_io.gfile().exists(path):
            file_io.gfile().remove(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def is_training_chief():
    """Whether this process is the one of its training cluster (TF_CONFIG)
    that holds the output directory's lock: the "chief" task, else worker
    0; true without a cluster. All workers of a multi-worker run train into
    the same directory."""
    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
        cluster, task = config.get("cluster") or {}, config.get("task") or {}
    except (ValueError, AttributeError):
        return True
    if not cluster or not task:
        return True
    if "chief" in cluster:
        return task.get("type") == "chief"
    return task.get("type") == "worker" and int(task.get("index", 0)) == 0


def lock_output_dir(output_dir, flag_name="output_dir"):
    """Makes this run the one training run of `output_dir`: creates the
    directory and its lock file, refreshed from a daemon thread until
    `release_output_locks` (which `releases_output_lock` calls when the
    script's main ends, however it ends). Call it after the input checks,
    before the first write.

    A lock left by a run that no longer runs (see `_lock_is_live`) is taken
    over, with a log line naming that run. Locally the lock is created with
    a hard link (or an exclusive create), so of two racing runs exactly one
    wins. Through tf.io.gfile (gs://, ram://, ...) it is a rename that
    refuses to overwrite, which TensorFlow implements as a check followed by
    a copy: on object stores two runs started within the same second can
    both pass it; reading the lock back afterwards narrows that window to
    the time between the two runs' writes.

    Args:
      output_dir: the run's --output_dir.
      flag_name: its flag, for the message.

    Raises:
      InputError: another training run holds the directory; the one line
        names its host, pid and start time.
    """
    if not is_training_chief():
        return
    path = os.path.join(output_dir, LOCK_FILE)
    if path in _HELD_LOCKS:
        return
    now = time.time()
    content = {
        "host": socket.gethostname(), "boot_id": _boot_id(),
        "pid_namespace": _pid_namespace(), "pid": os.getpid(),
        "process_start": _process_start(os.getpid()), "started": now,
        "started_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now)),
        "refreshed": now, "command": " ".join(sys.argv), "token": uuid.uuid4().hex}
    data = (json.dumps(content, indent=2) + "\n").encode("utf-8")
    in_use = ("--%s %s is in use by another training run (%s): wait for it to end or "
              "choose another --%s (evaluation and prediction runs may share it)")
    if file_io.is_remote(output_dir):
        file_io.gfile().makedirs(output_dir)
    else:
        os.makedirs(output_dir, exist_ok=True)
    for _ in range(3):
        raw, holder = _read_lock(path)
        if holder is not None:
            if holder and _lock_is_live(holder):
                raise InputError(in_use % (flag_name, output_dir, _describe_holder(holder),
                                           flag_name))
            if holder:
                logs.log_warning("Taking over --%s %s from a training run that has ended "
                                 "without releasing it (%s)", flag_name, output_dir,
                                 _describe_holder(holder))
            else:
                logs.log_warning("Taking over --%s %s: its lock %s is unreadable",
                                 flag_name, output_dir, path)
            # Removed only if no other run has replaced it meanwhile.
            if _read_lock(path)[0] == raw:
                _remove(path)
        if _create_exclusively(path, data):
            break
    else:
        raise InputError("--%s %s: could not take its lock %s, other runs keep taking it"
                         % (flag_name, output_dir, path))
    holder = _read_lock(path)[1]
    if not holder or holder.get("token") != content["token"]:
        raise InputError(in_use % (flag_name, output_dir,
                                   _describe_holder(holder or {}), flag_name))
    lock = _HELD_LOCKS[path] = _HeldLock(path, content)
    lock.thread.start()


def release_output_locks():
    """Stops refreshing the locks this process holds and removes them (each
    only while it still names this run)."""
    while _HELD_LOCKS:
        path, lock = _HELD_LOCKS.popitem()
        if lock.content["pid"] != os.getpid():
            continue  # A forked child's copy: the lock is its parent's.
        lock.stop.set()
        # A refresh under way would put the file back after its removal.
        if lock.thread is not threading.current_thread():
            lock.thread.join(timeout=60)
        try:
            holder = _read_lock(path)[1]
            if holder and holder.get("token") == lock.content["token"]:
                _remove(path)
        except Exception as e:  # A lock left behind is taken over by the next run.
            logs.log_warning("Could not remove %s: %s", path, e)


# Also for ends that pass by `releases_output_lock` (sys.exit in a thread, ...).
atexit.register(release_output_locks)


def releases_output_lock(main):
    """Decorator of a training script's main: the output directory lock its
    run took (`lock_output_dir`) is released when main returns or raises
    (errors, KeyboardInterrupt, the SIGTERM handling's exception)."""
    @functools.wraps(main)
    def wrapped(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        finally:
            release_output_locks()
    return wrapped

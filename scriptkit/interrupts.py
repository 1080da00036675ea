"""Ctrl-C (SIGINT) and SIGTERM (preemptible machines, job schedulers): a
signal becomes a KeyboardInterrupt where the work may stop, is held back
where a step must finish whole, and is remembered so that the run ends by
it (`script_runner.run_script`).

In: the process's signals. Out: `interrupted()` (the signal's number, or
None), KeyboardInterrupt from `raise_if_interrupted` and at the end of an
`interrupts_held` block, and InterruptedExit for a run that stopped after
saving its work. Needs no TensorFlow, and nothing else of this project.
"""

import contextlib
import signal
import threading


INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class InterruptedExit(SystemExit):
    """The end of a run that a SIGINT or SIGTERM stopped after doing what it
    must (e.g. saving a checkpoint); the exit status is 128 + the signal's
    number, and a script run from the shell ends by the signal itself
    (see `script_runner.run_script`)."""

# signal: the first interrupting signal's number, or None. held: while > 0,
# a first signal is only recorded (see `interrupts_held`).
# early: the handlers of `hold_interrupts_until_run` are in place (and
# before_early: the handlers they replaced). caught: how many
# `interrupts_caught` blocks are open. exit_signal: the signal the run ends
# by, or None (see `set_exit_signal`).
_INTERRUPT = {"signal": None, "held": 0, "on_hold": None, "exit_signal": None,
              "early": False, "before_early": {}, "caught": 0}


def hold_interrupts_until_run():
    """For a script run as the program, from its first import on (quiet_tf
    calls this before it imports TensorFlow): a SIGINT or SIGTERM that comes
    before `script_runner.run_script` installs its handlers is recorded, and
    `run_script` ends the run with it before `main` does any work. Without this, a SIGINT
    in those seconds would be lost where the process started ignoring it (a
    background job of a shell) and raise in the middle of an import
    elsewhere. A second signal ends the process at once. Main thread only;
    once per process, and nothing once the run has begun (a module that
    imports quiet_tf late, in the middle of the work)."""
    if (_INTERRUPT["early"] or _INTERRUPT["caught"]
            or threading.current_thread() is not threading.main_thread()):
        return
    _INTERRUPT["before_early"] = {signum: signal.signal(signum, _on_interrupt)
                                  for signum in INTERRUPT_SIGNALS}
    _INTERRUPT["held"] += 1
    _INTERRUPT["early"] = True


def _on_interrupt(signum, frame):
    first = _INTERRUPT["signal"] is None
    _INTERRUPT["signal"] = _INTERRUPT["signal"] or signum
    if first and _INTERRUPT["held"]:
        # A second signal ends the process at once, even in the middle of a
        # long TensorFlow call (Python handlers run only between its calls).
        for other in INTERRUPT_SIGNALS:
            signal.signal(other, signal.SIG_DFL)
        if _INTERRUPT["on_hold"]:
            _INTERRUPT["on_hold"](signum)
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_caught():
    """Inside, SIGINT and SIGTERM raise KeyboardInterrupt (SIGTERM would
    otherwise end the process on the spot, leaving temporary files; a SIGINT
    that the parent process set to be ignored, as shells do for background
    jobs, counts too) and the signal is remembered (`interrupted`). The
    previous handlers come back on leaving. Outside the main thread, where
    Python cannot set signal handlers, nothing changes."""
    previous = {}
    # A signal recorded since the script's first import stays recorded.
    early = _INTERRUPT["early"]
    _INTERRUPT.update(signal=_INTERRUPT["signal"] if early else None, held=0, on_hold=None,
                      early=False)
    if threading.current_thread() is threading.main_thread():
        for signum in INTERRUPT_SIGNALS:
            previous[signum] = signal.signal(signum, _on_interrupt)
        if early:  # On leaving, the handlers from before the early hold.
            previous.update(_INTERRUPT["before_early"])
    _INTERRUPT["caught"] += 1
    try:
        yield
    finally:
        _INTERRUPT["caught"] -= 1
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _INTERRUPT.update(signal=None, held=0, on_hold=None)


def interrupted():
    """The number of the SIGINT or SIGTERM this run got, or None."""
    return _INTERRUPT["signal"]


def held_until_run():
    """Whether the handlers of `hold_interrupts_until_run` are in place (a
    script run as the program, before `interrupts_caught` takes over)."""
    return _INTERRUPT["early"]


def set_exit_signal(signum):
    """Records `signum` (an int, or None to clear it) as the signal that
    ends the run: `script_runner.run_script` sets it when a signal stopped
    the script, and ends the process by it once absl's cleanup is done
    (`interrupted()` no longer tells it then: leaving `interrupts_caught`
    forgets the signal)."""
    _INTERRUPT["exit_signal"] = signum


def exit_signal():
    """The signal of `set_exit_signal` (an int), or None."""
    return _INTERRUPT["exit_signal"]


def raise_if_interrupted():
    """Raises KeyboardInterrupt if the run got a SIGINT or SIGTERM.

    Called before an output is put in place: the KeyboardInterrupt that the
    signal raised can be lost, since Python prints and drops an exception
    raised while it runs a finalizer (a `__del__` method, a weakref or
    multiprocessing callback), and the work would then go on to the end.
    Inside `interrupts_held`, the block's end raises instead; other threads
    (the lock's heartbeat) never raise: the signal concerns the run's own
    thread.
    """
    if (_INTERRUPT["signal"] is not None and not _INTERRUPT["held"]
            and threading.current_thread() is threading.main_thread()):
        raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_held(on_hold=None, raise_after=True):
    """Inside, a first SIGINT or SIGTERM is recorded (and `on_hold(signum)`
    called, e.g. to log what will happen) instead of raising; a second one
    raises KeyboardInterrupt at once. The handlers of `interrupts_caught`
    are installed for the time of the block if they are not (main thread
    only).

    Args:
      on_hold: function(signum), called on the first signal.
      raise_after: on leaving the block normally, raise KeyboardInterrupt if
        a signal came (for steps that must finish whole, such as putting
        several files in place); False: the caller looks at `interrupted()`.
    """
    installed = {}
    if threading.current_thread() is threading.main_thread():
        for signum in INTERRUPT_SIGNALS:
            if signal.getsignal(signum) is not _on_interrupt:
                installed[signum] = signal.signal(signum, _on_interrupt)
    _INTERRUPT["held"] += 1
    previous_on_hold, _INTERRUPT["on_hold"] = _INTERRUPT["on_hold"], on_hold
    try:
        yield
    finally:
        _INTERRUPT["held"] -= 1
        _INTERRUPT["on_hold"] = previous_on_hold
        got = _INTERRUPT["signal"]
        if installed:
            # Not under `interrupts_caught` (a library call, a test): the
            # signal concerns this block only.
            _INTERRUPT["signal"] = None
            for signum, handler in installed.items():
                signal.signal(signum, handler)
    if raise_after and got is not None:
        raise KeyboardInterrupt

"""course_lib.procs: child processes in sessions of their own that never outlive their caller."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

from course_lib import procs, procs_start
from course_lib.procs import is_running

needs_sessions = pytest.mark.skipif(not hasattr(os, "setsid"), reason="process groups and setsid need a POSIX system")


# importable entry points: a child imports them by module and name
def say(channel, value):
    channel.send(("hello", value, os.getpid(), os.getpgid(0) if hasattr(os, "getpgid") else None))


def raise_it(channel):
    raise ValueError("raised on purpose in the child")


def print_then_exit(channel, code):
    print("last words on stdout", flush=True)
    sys.stderr.write("last words on stderr\n")
    sys.stderr.flush()
    os._exit(code)


def start_grandchild_and_hang(channel):
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    channel.send(child.pid)
    time.sleep(3600)


def collect(kids, want_exits, timeout=60.0):
    events, deadline = [], time.monotonic() + timeout
    while sum(e.kind == "exit" for e in events) < want_exits and time.monotonic() < deadline:
        events += kids.events(deadline - time.monotonic())
    return events


@pytest.mark.slow
@needs_sessions
def test_children_report_in_order_and_lead_their_own_group():
    with procs.Children("test") as kids:
        for i in range(3):
            kids.start(say, i)
        events = collect(kids, 3)
    messages = {e.index: e.value for e in events if e.kind == "message"}
    assert sorted(messages) == [0, 1, 2] and [messages[i][1] for i in range(3)] == [0, 1, 2]
    for _, _, pid, pgid in messages.values():
        assert pgid == pid != os.getpid()  # each child leads a process group of its own
    for i in range(3):  # each child's exit comes after its message
        kinds = [e.kind for e in events if e.index == i]
        assert kinds == ["message", "exit"]
    assert procs.leftover_processes() == []


@pytest.mark.slow
def test_an_exception_comes_back_with_the_childs_traceback():
    with procs.Children("test") as kids:
        kids.start(raise_it)
        events = collect(kids, 1)
    (err,) = [e for e in events if e.kind == "error"]
    assert err.value[0] == "ValueError" and "raised on purpose" in err.value[1] and "raise_it" in err.value[1]
    assert [e.value for e in events if e.kind == "exit"] == [1]


@pytest.mark.slow
def test_a_child_that_dies_leaves_its_own_output_for_the_parent():
    with procs.Children("test") as kids:
        kids.start(print_then_exit, 9)
        events = collect(kids, 1)
        tail = kids.log_tail(0)
    assert [e.value for e in events if e.kind == "exit"] == [9]
    assert "last words on stdout" in tail and "last words on stderr" in tail


@pytest.mark.slow
def test_a_module_that_crashes_at_import_in_the_child():
    import crash_at_import

    with procs.Children("test") as kids:
        kids.start(say, crash_at_import.work)  # the argument's module is imported in the child too
        events = collect(kids, 1)
        tail = kids.log_tail(0)
    assert [e.kind for e in events] == ["exit"] and events[0].value == 7
    assert "dying while being imported" in tail


@pytest.mark.slow
@needs_sessions
def test_stop_kills_grandchildren_too():
    with procs.Children("test") as kids:
        kids.start(start_grandchild_and_hang)
        (event,) = kids.events(60)
        grandchild = event.value
        child = kids.pids[0]
        assert is_running(grandchild) and is_running(child)
    assert not is_running(grandchild) and not is_running(child)
    assert procs.leftover_processes() == []


@pytest.mark.slow
@needs_sessions
def test_a_closed_lifeline_makes_the_child_take_down_its_group():
    kids = procs.Children("test")
    kids.start(start_grandchild_and_hang)
    (event,) = kids.events(60)
    grandchild, child = event.value, kids.pids[0]
    kids._children[0].lifeline.close()  # what the parent's death does to the pipe
    deadline = time.monotonic() + 10
    while (is_running(child) or is_running(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not is_running(child) and not is_running(grandchild), "the child must act on a closed lifeline by itself"
    finally:
        kids.stop()


@pytest.mark.slow
def test_ctrl_c_during_stop_is_delivered_after_it():
    kids = procs.Children("test")
    kids.start(start_grandchild_and_hang)
    kids.events(60)
    main = threading.main_thread().ident
    with pytest.raises(KeyboardInterrupt):
        with procs._sigint_held():
            signal.pthread_kill(main, signal.SIGINT)
            time.sleep(0.2)  # the interrupt waits for the block to end
            kids.stop()
    assert procs.leftover_processes() == []


def test_arguments_are_checked_up_front():
    kids = procs.Children("test")
    with pytest.raises(TypeError, match="importable|child process"):
        kids.start(lambda channel: None)
    with pytest.raises(TypeError, match="picklable"):
        kids.start(say, threading.Lock())
    with pytest.raises(TypeError, match="env"):
        procs.Children("test", env={"A": 1})
    kids.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        kids.start(say, 1)


def test_start_methods():
    assert procs.start_method(fresh=True) == "spawn"
    assert procs.start_method() in ("forkserver", "spawn")


@pytest.mark.slow
def test_a_start_that_hangs_kills_the_server_and_ends(monkeypatch):
    """A forkserver that never answers: the watchdog kills it, which ends the wait."""
    import subprocess

    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    monkeypatch.setattr(procs_start, "_forkserver_pid", lambda: server.pid)

    class Hanging:
        def start(self):
            server.wait()  # returns when the watchdog has killed the "server"
            raise EOFError

    t0 = time.monotonic()
    assert procs_start.start_watched(Hanging(), timeout=0.2) is False
    assert time.monotonic() - t0 < 10 and server.poll() is not None

    class Quick:
        def start(self):
            return None

    assert procs_start.start_watched(Quick(), timeout=5) is True


def test_two_hung_starts_give_a_clear_error(monkeypatch):
    monkeypatch.setattr(procs, "_start_watched", lambda proc, timeout: False)
    kids = procs.Children("hung")
    with pytest.raises(RuntimeError, match="did not answer within .* twice"):
        kids.start(os.getpid)
    assert len(kids) == 0


# ----------------------------------------------------------------------------------------------
# the one supervision loop


def say_twice_then_wait(channel, seconds):
    channel.send(1)
    channel.send(2)
    time.sleep(seconds)


@pytest.mark.slow
def test_supervise_ends_when_told_and_keeps_the_rest_for_later():
    with procs.Children("test") as kids:
        kids.start(say_twice_then_wait, 0.0)
        first = kids.supervise(lambda e: e.kind == "message", timeout=60)
        assert first.done and not first.timed_out and first.messages == {0: [1]}
        rest = kids.supervise(timeout=60)  # until every child has exited: the second message was kept
        assert not rest.done and rest.messages == {0: [2]} and rest.exits == {0: 0}
        assert kids.exitcode(0) == 0


@pytest.mark.slow
def test_supervise_gives_grace_after_done_and_collects_exit_codes():
    with procs.Children("test") as kids:
        for i in range(2):
            kids.start(say, i)
        seen = []
        run = kids.supervise(
            lambda e: seen.append(e) or len([x for x in seen if x.kind == "message"]) == 2, timeout=60, grace=10
        )
        assert run.done and sorted(run.messages) == [0, 1]
        assert [kids.exitcode(i) for i in range(2)] == [0, 0]  # the grace let both exit


@pytest.mark.slow
@needs_sessions
def test_supervise_stops_everything_at_the_deadline_and_keeps_the_output():
    with procs.Children("test") as kids:
        kids.start(start_grandchild_and_hang)
        kids.start(print_then_exit, 0)
        grandchild = []
        t0 = time.monotonic()
        run = kids.supervise(lambda e: grandchild.append(e.value) if e.kind == "message" else None, timeout=3)
        assert run.timed_out and not run.done and 3 <= time.monotonic() - t0 < 30
        assert run.exits.get(1) == 0 and 0 not in run.exits
        assert not is_running(grandchild[0]) and not is_running(kids.pids[0])
        assert "last words on stdout" in kids.log_tail(1)  # read back after the log file was removed
    assert procs.leftover_processes() == []


@pytest.mark.slow
def test_supervise_moves_its_deadline_and_stops_on_an_error_in_the_handler():
    deadline = [time.monotonic() + 60]

    def on_event(event):
        if event.kind == "message":
            deadline[0] = time.monotonic() + 0.5  # e.g. start-up done: the run gets its own time
        return False

    with procs.Children("test") as kids:
        kids.start(say_twice_then_wait, 3600)
        run = kids.supervise(on_event, timeout=lambda: deadline[0] - time.monotonic())
        assert run.timed_out and run.messages == {0: [1, 2]}
    with procs.Children("test") as kids:
        kids.start(start_grandchild_and_hang)

        def fail(event):
            raise RuntimeError("the handler gave up")

        with pytest.raises(RuntimeError, match="gave up"):
            kids.supervise(fail, timeout=60)
        assert not is_running(kids.pids[0])  # stopped before the error reached the caller
    assert procs.leftover_processes() == []


@pytest.mark.slow
@pytest.mark.skipif(procs.start_method() != "forkserver", reason="no forkserver here")
def test_the_forkserver_is_found_among_this_processs_children():
    import psutil

    with procs.Children("test") as kids:
        kids.start(say, 0)
        kids.supervise(timeout=60)
    pid = procs_start._forkserver_pid()
    assert pid is not None and "forkserver" in " ".join(psutil.Process(pid).cmdline())
    assert pid in [p.pid for p in procs.helper_processes()]

"""The lines a load benchmark prints under a step's row: what went wrong with the
recordings, the caller's own stalls, and the media threads' counters."""

from __future__ import annotations


def wrong_recordings(
    lengths: list[float | None], expected: tuple[float, float]
) -> dict[str, object]:
    """The recordings not of the ``expected`` length (s): how many were shorter (and the
    shortest), longer (and the longest), or unreadable."""
    short = [d for d in lengths if d is not None and d < expected[0]]
    long = [d for d in lengths if d is not None and d > expected[1]]
    return {
        "recordings_short": len(short),
        "shortest": min(short, default=float("nan")),
        "recordings_long": len(long),
        "longest": max(long, default=float("nan")),
        "recordings_unread": sum(1 for d in lengths if d is None),
    }


def print_prompts(r: dict[str, object]) -> None:
    """The line under a step's row on when the prompt began, and the capture's losses."""
    start = r.get("prompt_start")
    if isinstance(start, tuple):
        dropped = r.get("capture_dropped", -1)
        print(
            f"       the prompt began p50/p99/max {start[0]:.2f} / {start[1]:.2f} / "
            f"{start[2]:.2f} s after the call's first packet"
            + (f"; the capture lost {dropped} packets" if dropped else ""),
            flush=True,
        )


def print_recordings(r: dict[str, object]) -> None:
    """The lines under a step's row on the calls completed that gave no digits at all (the
    digits column counts the calls that did), and the recordings of the wrong length."""
    ok, calls = r.get("ok", 0), r.get("digits_calls", 0)
    if isinstance(ok, int) and isinstance(calls, int) and calls < ok:
        print(
            f"       calls completed with no digits page (get_number heard none in time): "
            f"{ok - calls}",
            flush=True,
        )
    short, long, unread = (
        r.get("recordings_short", 0),
        r.get("recordings_long", 0),
        r.get("recordings_unread", 0),
    )
    if short or long or unread:
        print(
            f"       recordings of the wrong length: {short} shorter (the shortest "
            f"{r['shortest']:.2f} s), {long} longer (the longest {r['longest']:.2f} s), "
            f"{unread} unreadable",
            flush=True,
        )


def print_driver(r: dict[str, object]) -> None:
    """The line under a step's row on the calls whose caller sent its key presses off
    schedule (the driver stalled: no server could hear them in time), if any."""
    astray = r.get("digits_astray", 0)
    late = r.get("late_starts", 0)
    if late:
        print(
            f"       the caller (SIPp) began its stream more than 1 s after the server "
            f"answered on {late} calls (by up to {r['late_start_max']:.2f} s), so sent "
            "every key press that late: its own stall, not the server's",
            flush=True,
        )
    if not r.get("digits_sent") and r.get("ok"):
        print("       the capture of the caller's key presses got none", flush=True)
    elif astray:
        print(
            f"       the caller (SIPp) sent the key presses of {astray} of "
            f"{r.get('digits_sent', 0)} calls off schedule (by up to "
            f"{r['digits_astray_max']:.2f} s): its own stall, not the server's",
            flush=True,
        )


def thread_counters(stats: dict) -> dict[str, float]:  # type: ignore[type-arg]
    """The media threads' counters (``/api/stats``' ``media_thread``), summed over the
    workers (the largest ``max_late_ms``); empty where the media runs on the loop."""
    total: dict[str, float] = {}
    for each in stats.get("workers") or [stats]:
        for key, value in (each.get("media_thread") or {}).items():
            if key == "max_late_ms":
                total[key] = max(total.get(key, 0.0), value)
            else:
                total[key] = total.get(key, 0) + value
    return total


def print_thread(r: dict[str, object]) -> None:
    """The line under a step's row with its media threads' counters, if it had any."""
    thread = r.get("thread")
    if isinstance(thread, dict) and thread:
        print(
            f"       media thread: {thread['late_slots']} slots over 2 ms late (latest "
            f"{thread['max_late_ms']:.1f} ms), {thread['skipped_slots']} skipped; "
            f"{thread['stale_frames']} frames after their slot, in whose place went "
            f"{thread.get('covered', 0)} of the call's own (a prompt's cover, an event "
            "going on) and "
            f"{thread['fillers']} of silence",
            flush=True,
        )

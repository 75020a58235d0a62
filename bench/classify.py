"""Callee classification (answering-machine detection) on the labelled sets of answered calls.

    .venv/bin/python -m bench.classify [--set small|larger|both] [--count 400] [--seed 1]
                                       [--show 10] [--peer auto|asterisk|none | --no-peer]
                                       [--asterisk PATH] [--modules DIR] [--amd-args ARGS]
                                       [--concurrency 20]

Runs :class:`callhook.media.classify.CalleeClassifier` with its default options over the
shipped set (tests/data/classify, 24 clips) and the larger one (400 clips, made by
:func:`bench.classifyset.larger_set` into ``~/.cache/callhook-bench/`` the first time, in
about a minute), on a virtual clock: each clip is fed 20 ms frame by frame from its start
(the answer) until the classifier is done, then
:meth:`~callhook.media.classify.CalleeClassifier.finish` if the audio ran out first.

Printed, per set:

1. Accuracy per class. Right is live → ``live``; machine → ``answering_machine``; fax →
   ``fax_machine``; silence → ``unknown`` with reason ``silence``. Also per voice source
   (piper, espeak, real FSDD speech) and fax kind.
2. The confusion table (rows: the truth; columns: the decision, ``unknown`` by reason).
3. Time to a decision, p50/p95 (seconds from the answer; a live one also from the end of the
   answer, what a caller waits).
4. For machines classified as such: the greeting's end. With a beep: how often it was found,
   its start error ``|measured - labelled|`` and end error p50/p95 (ms), when it was said
   (after the beep's end); without a beep: how the end was given (silence, timeout, a false
   beep) and when, after the greeting's end.
5. CPU: process time per clip (the classifier made and fed; reading the WAV and loading the
   speech model's weights, once, not counted) and per second of audio fed.

Then, on the same clips with the same labels, the peer: Asterisk 20's ``AMD()`` with its
defaults (:mod:`bench.classify_peer`: each clip a SIP call into an Asterisk of the run's own,
20 at once), its figures in the same shape (accuracy per class, confusion by AMDSTATUS and
AMDCAUSE, time to a verdict, CPU of the whole asterisk process), and a table of the two side
by side. ``--peer auto`` (the default) runs it when an Asterisk 20 with chan_sip and app_amd
and SIPp are found, and says why not otherwise; ``--peer asterisk`` insists; ``--no-peer``
(``--peer none``) leaves it out.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import classify_peer, classifyset
from bench.classify_peer import p50_p95
from callhook.events import ClassifyOptions, FarEndClassified, GreetingEnded
from callhook.media.classify import CalleeClassifier

SMALL = Path(__file__).resolve().parent.parent / "tests" / "data" / "classify"
FRAME = 160
EXPECTED = {
    "live": "live",
    "machine": "answering_machine",
    "fax": "fax_machine",
    "silence": "unknown",
}
COLUMNS = ("live", "answering_machine", "fax_machine", "unknown/silence", "unknown/timeout", "-")


@dataclass
class Outcome:
    """What the classifier said about one clip."""

    label: dict[str, Any]
    decision: FarEndClassified | None = None
    ended: GreetingEnded | None = None
    fed_seconds: float = 0.0
    cpu: float = 0.0
    news: list[str] = field(default_factory=list)

    @property
    def column(self) -> str:
        if self.decision is None:
            return "-"
        if self.decision.far_end_type == "unknown":
            return f"unknown/{self.decision.reason}"
        return self.decision.far_end_type

    @property
    def right(self) -> bool:
        d = self.decision
        if d is None:
            return False
        cls = self.label["class"]
        return d.far_end_type == EXPECTED[cls] and (cls != "silence" or d.reason == "silence")


def run(directory: Path, labels: list[dict[str, Any]], options: ClassifyOptions) -> list[Outcome]:
    """Each clip through a new classifier, frame by frame, on the audio's clock."""
    outcomes = []
    # Untimed: the first classifier loads the speech model's weights, once per process.
    warm = CalleeClassifier(options)
    first = classifyset.read_clip(directory / labels[0]["file"])
    for i in range(min(len(first) // FRAME, 100)):
        warm.feed(first[i * FRAME : (i + 1) * FRAME])
    for label in labels:
        samples = classifyset.read_clip(directory / label["file"])
        outcome = Outcome(label)
        started = time.process_time()
        classifier = CalleeClassifier(options)
        frames = len(samples) // FRAME
        fed = 0
        news: list[Any] = []
        for i in range(frames):
            news += classifier.feed(samples[i * FRAME : (i + 1) * FRAME])
            fed += 1
            if classifier.done:
                break
        if not classifier.done:
            news += classifier.finish()
        outcome.cpu = time.process_time() - started
        outcome.fed_seconds = fed * FRAME / classifyset.FS
        for item in news:
            if isinstance(item, FarEndClassified):
                outcome.decision = item
            elif isinstance(item, GreetingEnded):
                outcome.ended = item
            outcome.news.append(repr(item))
        outcomes.append(outcome)
    return outcomes


def report(name: str, outcomes: list[Outcome], show: int) -> None:
    print(f"\n== {name}: {len(outcomes)} clips")
    # 1. accuracy per class, and by source / kind
    print(f"\n  {'class':9} {'right':>9} {'share':>7}   by source or kind")
    for cls in classifyset.CLASSES:
        of = [o for o in outcomes if o.label["class"] == cls]
        if not of:
            continue
        right = sum(o.right for o in of)
        groups: dict[str, list[Outcome]] = defaultdict(list)
        for o in of:
            if cls == "fax":
                groups[o.label["fax"]["kind"]].append(o)
            elif cls == "machine":
                groups[o.label["source"]].append(o)
                kind = o.label["beep"]["kind"] if o.label["beep"] else "no beep"
                groups[kind].append(o)
            elif cls == "live":
                groups[o.label["source"]].append(o)
                if o.label["second_answer"] is not None:
                    groups["2nd hello"].append(o)
        by = ", ".join(f"{k} {sum(o.right for o in v)}/{len(v)}" for k, v in groups.items())
        print(f"  {cls:9} {f'{right}/{len(of)}':>9} {right / len(of):>7.0%}   {by}")
    total = sum(o.right for o in outcomes)
    print(f"  {'all':9} {f'{total}/{len(outcomes)}':>9} {total / len(outcomes):>7.0%}")
    # 2. confusion
    print("\n  " + f"{'truth / said':14}" + "".join(f"{c:>18}" for c in COLUMNS))
    for cls in classifyset.CLASSES:
        counts = Counter(o.column for o in outcomes if o.label["class"] == cls)
        print(f"  {cls:14}" + "".join(f"{counts.get(c, 0):>18}" for c in COLUMNS))
    # 3. time to a decision
    print("\n  time to a decision, p50 / p95 (s)")
    for cls, kind in EXPECTED.items():
        hits = [o for o in outcomes if o.label["class"] == cls and o.right and o.decision]
        times = [o.decision.seconds for o in hits if o.decision]
        extra = ""
        if cls == "live":
            after = [o.decision.seconds - o.label["speech_end"] for o in hits if o.decision]
            extra = f"   after the answer's end {p50_p95(after)}"
        print(f"  {cls:9} ({kind}) {p50_p95(times)}{extra}")
    # 4. the greeting's end
    machines = [o for o in outcomes if o.label["class"] == "machine" and o.right]
    beeped = [o for o in machines if o.label["beep"] is not None]
    if beeped:
        hows = Counter(o.ended.how if o.ended else "-" for o in beeped)
        found = [o for o in beeped if o.ended and o.ended.how == "beep" and o.ended.beep_start]
        start_err = [abs(o.ended.beep_start - o.label["beep"]["start"]) for o in found if o.ended]
        end_err = [
            abs(o.ended.beep_end - o.label["beep"]["end"])
            for o in found
            if o.ended and o.ended.beep_end is not None
        ]
        late = [o.ended.seconds - o.label["beep"]["end"] for o in found if o.ended]
        print(
            f"\n  machines with a beep (classified as machines): {len(beeped)}; ended by "
            + ", ".join(f"{k} {v}" for k, v in hows.most_common())
        )
        by_kind: dict[str, list[Outcome]] = defaultdict(list)
        for o in beeped:
            by_kind[o.label["beep"]["kind"]].append(o)
        print(
            "    beep found by kind: "
            + ", ".join(
                f"{k} {sum(1 for o in v if o in found)}/{len(v)}" for k, v in by_kind.items()
            )
        )
        print(f"    beep start error p50 / p95 (ms): {p50_p95(start_err, 1000, 0)}")
        print(f"    beep end error p50 / p95 (ms):   {p50_p95(end_err, 1000, 0)}")
        print(f"    said after the beep's end p50 / p95 (s): {p50_p95(late)}")
    unbeeped = [o for o in machines if o.label["beep"] is None]
    if unbeeped:
        hows = Counter(o.ended.how if o.ended else "-" for o in unbeeped)
        after = [o.ended.seconds - o.label["speech_end"] for o in unbeeped if o.ended]
        print(
            f"  machines without a beep: {len(unbeeped)}; ended by "
            + ", ".join(f"{k} {v}" for k, v in hows.most_common())
            + f"; said after the greeting's end p50 / p95 (s): {p50_p95(after)}"
        )
    # 5. CPU
    cpu = sum(o.cpu for o in outcomes)
    audio = sum(o.fed_seconds for o in outcomes)
    print(
        f"\n  CPU: {cpu / len(outcomes) * 1000:.1f} ms per clip, {cpu / audio * 1000:.2f} ms per"
        f" second of audio ({audio:.0f} s fed, {cpu:.1f} s)"
    )
    wrong = [o for o in outcomes if not o.right]
    if wrong and show:
        print(f"\n  wrong ({len(wrong)}; first {min(show, len(wrong))}):")
        for o in wrong[:show]:
            e = o.label
            decided = f"{o.decision.far_end_type}/{o.decision.reason}" if o.decision else "-"
            at = f" at {o.decision.seconds:.2f} s" if o.decision else ""
            what = e["voice"] or (e["fax"]["kind"] if e["fax"] else e["source"])
            speech = (
                f" speech {e['speech_start']:.2f}-{e['speech_end']:.2f}" if e["speech_end"] else ""
            )
            print(
                f"    {e['file']} {e['class']} ({what}{speech}, noise {e['noise_dbfs']:.0f} dBFS"
                f"{', hum' if e['hum'] else ''}): {decided}{at}"
            )


def side_by_side(name: str, ours: list[Outcome], theirs: classify_peer.PeerRun) -> None:
    """callhook's and Asterisk AMD's main figures on the same clips, in one table."""
    amd = theirs.verdicts

    def share(right: int, of: int) -> str:
        return f"{right}/{of} {right / of:4.0%}" if of else "-"

    print(f"\n== {name}: side by side, the same {len(ours)} clips and labels")
    print(f"  {'':34}{'callhook':>20}{'Asterisk AMD()':>20}")
    for cls in classifyset.CLASSES:
        mine = [o for o in ours if o.label["class"] == cls]
        peer = [v for v in amd if v.label["class"] == cls]
        if mine:
            a = share(sum(o.right for o in mine), len(mine))
            b = share(sum(v.right for v in peer), len(peer))
            note = {"fax": " (AMD: no fax class)", "silence": " (AMD: MACHINE by design)"}
            print(f"  {cls + ' right':34}{a:>20}{b:>20}{note.get(cls, '')}")
    print(
        f"  {'all right':34}{share(sum(o.right for o in ours), len(ours)):>20}"
        f"{share(sum(v.right for v in amd), len(amd)):>20}"
    )
    two = [o for o in ours if o.label["class"] in ("live", "machine")]
    two_amd = [v for v in amd if v.label["class"] in ("live", "machine")]
    print(
        f"  {'live + machine clips right':34}{share(sum(o.right for o in two), len(two)):>20}"
        f"{share(sum(v.right for v in two_amd), len(two_amd)):>20}"
    )
    said_live = [o.decision is not None and o.decision.far_end_type == "live" for o in ours]
    person = sum(
        said == (o.label["class"] == "live") for said, o in zip(said_live, ours, strict=True)
    )
    print(
        f"  {'a person or not right':34}{share(person, len(ours)):>20}"
        f"{share(sum(v.person_right for v in amd), len(amd)):>20}"
    )
    for cls in ("live", "machine"):
        mine_t = [
            o.decision.seconds
            for o in ours
            if o.label["class"] == cls and o.right and o.decision is not None
        ]
        amd_t = classify_peer.decision_times(amd, cls)
        print(f"  {cls + ' decided (right) p50/p95 s':34}{p50_p95(mine_t):>20}{p50_p95(amd_t):>20}")
    cpu = sum(o.cpu for o in ours)
    fed = sum(o.fed_seconds for o in ours)
    per_call, _, per_second, _ = classify_peer.cpu_figures(theirs)
    print(f"  {'CPU ms per classified call':34}{cpu / len(ours) * 1000:>20.1f}{per_call:>20.1f}")
    print(f"  {'CPU ms per second of audio':34}{cpu / fed * 1000:>20.2f}{per_second:>20.2f}")
    print(
        "  a person or not: live said live (HUMAN) on live clips, anything else on the others."
        "\n  times: right verdicts only, seconds of the clip from the answer (AMD's: the log's"
        "\n  clock from AMD()'s start + the first 20 ms packet; AMD() runs right after Answer())."
        "\n  CPU, callhook: the classifier alone, fed from memory (no SIP, RTP or µ-law decoding),"
        "\n  until its verdict and, for a machine, the greeting's end; per second of the audio fed."
        "\n  CPU, Asterisk: the whole asterisk process over the calls (SIP, RTP, µ-law to linear,"
        "\n  dialplan, AMD, its log, its idle work), until AMD's verdict (it hangs up then); per"
        "\n  second of the audio AMD read. SIPp's CPU is in neither."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", choices=("small", "larger", "both"), default="both")
    parser.add_argument("--count", type=int, default=400, help="clips of the larger set")
    parser.add_argument("--seed", type=int, default=1, help="seed of the larger set")
    parser.add_argument("--show", type=int, default=10, help="list this many wrong clips")
    parser.add_argument(
        "--peer",
        choices=("auto", "asterisk", "none"),
        default="auto",
        help="Asterisk AMD() on the same clips: when found (auto), always, or not",
    )
    parser.add_argument("--no-peer", dest="peer", action="store_const", const="none")
    parser.add_argument("--asterisk", type=Path, help="the peer's Asterisk 20 binary")
    parser.add_argument("--modules", type=Path, help="its modules' directory")
    parser.add_argument("--amd-args", default="", help="AMD()'s arguments (default: none)")
    parser.add_argument("--concurrency", type=int, default=20, help="the peer's calls at once")
    args = parser.parse_args()
    options = ClassifyOptions()
    print(f"options: {options}")
    found: tuple[Path, Path] | None = None
    if args.peer != "none":
        located = classify_peer.locate(args.asterisk, args.modules)
        if isinstance(located, str):
            if args.peer == "asterisk":
                raise SystemExit(f"--peer asterisk: {located}")
            print(
                f"peer: Asterisk AMD() not run: {located}\n(here: --asterisk PATH; "
                "python -m bench.asterisk builds one; --no-peer says it is left out on purpose)"
            )
        else:
            found = located
            print(f"peer: Asterisk AMD() ({found[0]}), on the same clips after callhook's figures")
    else:
        print("peer: not run (--no-peer)")
    sets: list[tuple[str, Path]] = []
    if args.set in ("small", "both"):
        sets.append(("tests/data/classify", SMALL))
    if args.set in ("larger", "both"):
        directory = classifyset.larger_set(args.count, args.seed)
        sets.append((str(directory), directory))
    for name, directory in sets:
        labels = classifyset.load_labels(directory)
        outcomes = run(directory, labels, options)
        report(name, outcomes, args.show)
        if found is not None:
            binary, modules = found
            started = time.monotonic()
            theirs = classify_peer.run(
                directory, labels, binary, modules, args.amd_args, args.concurrency
            )
            classify_peer.report(name, theirs, args.show)
            side_by_side(name, outcomes, theirs)
            print(f"  (the peer's {len(labels)} calls took {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()

"""A far leg's duration limit (telephony/screening.py), on a loop whose timers the test
fires itself: minutes_max_call_duration hangs an answered far leg up, a new limit
replaces the old, and a leg that ended meanwhile is left alone."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from callhook.telephony.screening import DEFAULT_MAX_SECONDS, Screening


class Timer:
    def __init__(self, when: float, callback: Callable[..., object], args: tuple[Any, ...]):
        self.when, self.callback, self.args = when, callback, args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Loop:
    def __init__(self) -> None:
        self.timers: list[Timer] = []

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Timer:
        timer = Timer(delay, callback, args)
        self.timers.append(timer)
        return timer

    def fire(self) -> None:
        for timer in list(self.timers):
            if not timer.cancelled:
                timer.callback(*timer.args)


class Far:
    def __init__(self) -> None:
        self.limit: asyncio.TimerHandle | None = None
        self.ended = False
        self.call_id = "far-1"


class Service:
    """A Screening on the scripted loop, with the connector's hang-up recorded."""

    def __init__(self) -> None:
        self.loop: Any = Loop()
        self.hung_up: list[Any] = []
        self.screening = Screening(
            services=cast(Any, None),  # (the limit uses none of these)
            loop=cast(Any, self.loop),
            prompts=cast(Any, None),
            address="127.0.0.1",
            far_legs={},
            hang_up_far=self._hang_up_far,
        )

    def limit_far(self, far: Any, seconds: float = DEFAULT_MAX_SECONDS) -> None:
        self.screening.limit_far(far, seconds)

    def _hang_up_far(self, far: Any, cause: str | None = None) -> None:
        self.hung_up.append(far)
        far.ended = True


def test_a_far_leg_is_hung_up_when_its_time_is_up_and_a_new_limit_replaces_the_old() -> None:
    service = Service()
    far: Any = Far()
    service.limit_far(far)  # at its answer: Aculab's default
    service.limit_far(far, 120.0)  # secondary_call's own, once its pages are known
    first, second = service.loop.timers
    assert (first.when, first.cancelled) == (DEFAULT_MAX_SECONDS, True)
    assert (second.when, second.cancelled) == (120.0, False)
    service.loop.fire()
    assert service.hung_up == [far] and far.limit is None


def test_a_far_leg_that_ended_meanwhile_is_not_hung_up_again() -> None:
    service = Service()
    far: Any = Far()
    service.limit_far(far, 5.0)
    far.ended = True
    service.loop.fire()
    assert service.hung_up == []

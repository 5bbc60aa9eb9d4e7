"""Adaptive concurrency: how many requests may be in flight, learned from the server's throughput.

The limit grows while measured throughput rises, shrinks by half on HTTP 429, and stops growing for a while
after 5xx answers and timeouts. ``cap`` (``--concurrency``) is never exceeded. It starts at ``initial``: the
cap for servers that batch up to it (``runner.session.QUEUEING_KINDS``: vLLM), else half of ``cap`` (at least
64, at most ``cap``): at 2 s server latency every round trip spent below capacity costs seconds.

* Slow start, as in TCP: each success while the limit is in use adds one slot, so the limit doubles every round
  trip without waiting for a measurement (within 1/32 of ``cap`` it goes to ``cap``: 64 -> 256 in two round
  trips, not three). Once a window's throughput no longer rises, the extra slots of the
  last round trip only queue at the server: the limit is halved (never below what it was one round trip
  before) and slow start ends.
* Then gentle probes: grow by a quarter, keep it if throughput rose, revert if not; probe again now and then.

Throughput is measured in windows of about half a round trip: a window closes after ``limit / 2`` successful
completions (and at least ``min_window_s``). After a probe, windows within a round trip are discarded, so the
decision sees the new limit only.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from enum import StrEnum


class Signal(StrEnum):
    OK = "ok"
    RATE_LIMITED = "rate_limited"  # HTTP 429
    OVERLOADED = "overloaded"  # 5xx or timeout: the server struggles; hold, do not grow
    FAILED = "failed"  # connection errors, invalid bodies: says nothing about load


def signal_for(category: str | None) -> Signal:
    if category is None:
        return Signal.OK
    if category == "http_429":
        return Signal.RATE_LIMITED
    if category == "timeout" or category.startswith("http_5"):
        return Signal.OVERLOADED
    return Signal.FAILED


class AdaptiveLimiter:
    def __init__(self, cap: int, *, initial: int | None = None, min_window_s: float = 0.05,
                 rise: float = 1.05, clock: Callable[[], float] = time.monotonic) -> None:
        if cap < 1:
            raise ValueError("cap must be >= 1")
        self.cap = cap
        self.limit = max(1, min(cap, initial if initial is not None else max(64, cap // 2)))
        self.in_flight = 0
        self.min_window_s = min_window_s
        self.rise = rise
        self._clock = clock
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._slow_start = True
        self._hold_windows = 0
        self._steady_windows = 0
        self._prev_rate: float | None = None
        self._prev_limit = self.limit
        self._last_action = "start"
        self._window_start = clock()
        self._window_ok = 0
        self._saturated = False
        self._settling = False
        self._settle_until = 0.0
        self._last_decrease = -1e9
        self.peak_limit = self.limit
        self.history: deque[tuple[float, int, str]] = deque(maxlen=256)
        self.history.append((0.0, self.limit, "start"))
        self._t0 = clock()

    # -- slots -------------------------------------------------------------------------------------------

    async def acquire(self) -> None:
        if self.in_flight < self.limit and not self._waiters:
            self._take()
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release_slot()  # the slot was granted just before the cancellation
            elif future in self._waiters:  # a slot freed since may have dropped the cancelled future already
                self._waiters.remove(future)
            raise

    def _take(self) -> None:
        self.in_flight += 1
        if self.in_flight >= self.limit:
            self._saturated = True

    def _release_slot(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_flight < self.limit:
            future = self._waiters.popleft()
            if not future.done():
                self._take()
                future.set_result(None)

    def release(self, category: str | None) -> None:
        """Give the slot back and learn from how the attempt went (``category``: None, or the failure's)."""
        self._observe(signal_for(category))
        self._release_slot()

    # -- learning ----------------------------------------------------------------------------------------

    def _set_limit(self, value: int, reason: str) -> None:
        value = max(1, min(self.cap, value))
        if value != self.limit:
            # Requests already in flight still show the old limit's throughput: measure again only once they
            # have completed, about one round trip later (Little's law: round trip = in flight / rate).
            rtt = self.in_flight / self._prev_rate if self._prev_rate else 0.0
            self._settle_until = self._clock() + rtt
            self.limit = value
            self._settling = True
            self.peak_limit = max(self.peak_limit, value)
            self.history.append((round(self._clock() - self._t0, 3), value, reason))
            self._wake()

    def _observe(self, signal: Signal) -> None:
        now = self._clock()
        if signal is Signal.RATE_LIMITED:
            if now - self._last_decrease > self.min_window_s * 4:
                self._last_decrease = now
                self._slow_start = False
                self._hold_windows = 2
                self._prev_rate = None
                self._set_limit(self.limit // 2, "http_429")
            self._reset_window(now)
            return
        if signal is Signal.OVERLOADED:
            self._hold_windows = max(self._hold_windows, 2)
            return
        if signal is Signal.FAILED:
            return
        if self._slow_start and self._saturated and self._hold_windows == 0 and self.limit < self.cap:
            self.limit += 1
            if self.cap - self.limit <= self.cap // 32:  # the last few slots at once, not a round trip later
                self.limit = self.cap
            self.peak_limit = max(self.peak_limit, self.limit)
            self._wake()
        self._window_ok += 1
        elapsed = now - self._window_start
        if self._window_ok < max(4, self.limit // 2) or elapsed < self.min_window_s:
            return
        rate = self._window_ok / elapsed
        if self._settling:
            # Windows after a change still mix in the old limit's requests: measure once they are through.
            self._settling = now < self._settle_until
        else:
            self._decide(rate)
        self._reset_window(now)

    def _reset_window(self, now: float) -> None:
        self._window_start = now
        self._window_ok = 0
        self._saturated = self.in_flight >= self.limit

    def _decide(self, rate: float) -> None:
        prev = self._prev_rate
        if self._hold_windows > 0:
            self._hold_windows -= 1
            self._prev_rate = rate
            return
        if not self._saturated:
            return  # the runner did not fill the limit in this window: it says nothing about a higher one
        if self._slow_start:
            self._slow_start_window(rate)
            return
        if prev is None or rate > prev * self.rise:
            self._grow(rate)
            return
        if self._last_action == "grow":
            # The last step bought no throughput: the extra requests only queue at the server.
            self._set_limit(self._prev_limit, "revert")
        self._slow_start = False
        self._last_action = "hold"
        self._steady_windows += 1
        if self._steady_windows >= 8:  # probe now and then: the server's capacity may have changed
            self._steady_windows = 0
            self._grow(rate)
            return
        self._prev_rate = max(rate, prev) if self._last_action == "hold" else rate

    def _slow_start_window(self, rate: float) -> None:
        if self.history[-1][1] != self.limit:
            self.history.append((round(self._clock() - self._t0, 3), self.limit, "slow_start"))
        prev = self._prev_rate
        self._prev_rate = rate if prev is None else max(rate, prev)
        if prev is None or rate > prev * self.rise or self.limit >= self.cap:
            return
        self._slow_start = False
        self._last_action = "hold"
        self._set_limit(max(self.limit // 2, self._limit_one_round_trip_ago(rate)), "slow_start_end")

    def _limit_one_round_trip_ago(self, rate: float) -> int:
        rtt = self.in_flight / rate if rate > 0 else 0.0
        then = self._clock() - self._t0 - rtt
        earlier = [limit for t, limit, _ in self.history if t <= then]
        return earlier[-1] if earlier else self.history[0][1]

    def _grow(self, rate: float) -> None:
        self._prev_rate = rate
        self._prev_limit = self.limit
        self._last_action = "grow"
        factor = 2.0 if self._slow_start else 1.25
        self._set_limit(max(self.limit + 1, int(self.limit * factor)), "grow")

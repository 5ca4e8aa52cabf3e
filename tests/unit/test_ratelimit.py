"""Ports of client-go's default_rate_limiters_test.go."""

from __future__ import annotations

import pytest

from configmirror.clock import FakeClock
from configmirror.controller.ratelimit import (
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    TokenBucketRateLimiter,
    WithMaxWaitRateLimiter,
    default_controller_rate_limiter,
)

MS = 0.001


def test_exponential_doubles_per_item_and_forget_resets() -> None:
    limiter = ItemExponentialFailureRateLimiter(1 * MS, 1.0)
    assert [limiter.when("one") for _ in range(5)] == pytest.approx([1 * MS, 2 * MS, 4 * MS,
                                                                     8 * MS, 16 * MS])
    assert limiter.num_requeues("one") == 5
    assert [limiter.when("two") for _ in range(2)] == pytest.approx([1 * MS, 2 * MS])
    assert limiter.num_requeues("two") == 2
    limiter.forget("one")
    assert limiter.num_requeues("one") == 0
    assert limiter.when("one") == pytest.approx(1 * MS)


def test_exponential_caps_at_max() -> None:
    """TestItemExponentialFailureRateLimiterOverFlow, first half: 32 ms on the 6th failure,
    the cap from the 21st on with a 1 s cap."""
    limiter = ItemExponentialFailureRateLimiter(1 * MS, 1000.0)
    for _ in range(5):
        limiter.when("one")
    assert limiter.when("one") == pytest.approx(32 * MS)

    small_cap = ItemExponentialFailureRateLimiter(1 * MS, 1 * MS * 1000)
    for _ in range(20):
        small_cap.when("x")
    assert small_cap.when("x") == pytest.approx(1.0)


def test_exponential_past_2_to_the_1024_returns_the_cap_instead_of_overflowing() -> None:
    """Second half: 2.0**1024 raises OverflowError in Python (Go's float turns into +Inf),
    so the failures must go past 1024, through every exponent, and each still get the cap."""
    limiter = ItemExponentialFailureRateLimiter(1 * MS, 1000.0)
    delays = [limiter.when("overflow") for _ in range(1100)]
    assert limiter.num_requeues("overflow") == 1100
    assert delays[:3] == pytest.approx([1 * MS, 2 * MS, 4 * MS])
    assert set(delays[20:]) == {1000.0}


def test_fast_slow_gives_fast_delays_then_slow() -> None:
    limiter = ItemFastSlowRateLimiter(5 * MS, 10.0, 3)
    assert [limiter.when("one") for _ in range(5)] == [5 * MS] * 3 + [10.0] * 2
    assert limiter.num_requeues("one") == 5
    limiter.forget("one")
    assert limiter.num_requeues("one") == 0
    assert limiter.when("one") == 5 * MS


def test_max_of_returns_the_longest_delay_and_forget_reaches_all() -> None:
    limiter = MaxOfRateLimiter(ItemFastSlowRateLimiter(5 * MS, 3.0, 3),
                               ItemExponentialFailureRateLimiter(1 * MS, 1.0))
    assert [limiter.when("one") for _ in range(5)] == pytest.approx(
        [5 * MS, 5 * MS, 5 * MS, 3.0, 3.0])
    assert limiter.num_requeues("one") == 5
    limiter.forget("one")
    assert limiter.num_requeues("one") == 0
    assert limiter.when("one") == pytest.approx(5 * MS)


def test_max_of_counts_the_requeues_of_the_limiter_that_tracks_most() -> None:
    limiter = MaxOfRateLimiter(TokenBucketRateLimiter(qps=10, burst=100, clock=FakeClock()),
                               ItemExponentialFailureRateLimiter(1 * MS, 1.0))
    for _ in range(3):
        limiter.when("one")
    assert limiter.num_requeues("one") == 3, "the bucket tracks no item: 0 is not the answer"


def test_max_of_needs_a_limiter() -> None:
    with pytest.raises(ValueError, match="at least one limiter"):
        MaxOfRateLimiter()


def test_with_max_wait_caps_the_delay_and_forget_reaches_the_inner_limiter() -> None:
    limiter = WithMaxWaitRateLimiter(ItemFastSlowRateLimiter(5 * MS, 1000.0, 3), 500.0)
    assert [limiter.when("one") for _ in range(5)] == [5 * MS] * 3 + [500.0] * 2
    assert limiter.num_requeues("one") == 5
    limiter.forget("one")
    assert limiter.num_requeues("one") == 0
    assert limiter.when("one") == 5 * MS


def test_token_bucket_allows_a_burst_then_spaces_by_qps() -> None:
    clock = FakeClock()
    limiter = TokenBucketRateLimiter(qps=10, burst=2, clock=clock)
    assert limiter.when("a") == 0.0
    assert limiter.when("b") == 0.0
    assert limiter.when("c") == pytest.approx(0.1)
    assert limiter.when("d") == pytest.approx(0.2)
    clock.step(1.0)  # refills to at most the burst
    assert limiter.when("e") == 0.0
    assert limiter.num_requeues("a") == 0


def test_token_bucket_refills_continuously_a_fraction_of_a_token_at_a_time() -> None:
    clock = FakeClock()
    limiter = TokenBucketRateLimiter(qps=10, burst=2, clock=clock)
    assert limiter.when("a") == 0.0  # 1 token left
    clock.step(0.05)  # 1.5
    assert limiter.when("b") == 0.0, "half a token left: through at once"
    assert limiter.when("c") == pytest.approx(0.05), "half a token short: 50 ms at 10 qps"


@pytest.mark.parametrize(("qps", "burst"), [(0, 1), (-1, 1), (1, 0)])
def test_token_bucket_rejects_a_rate_or_burst_that_lets_nothing_through(
        qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match="qps > 0 and burst >= 1"):
        TokenBucketRateLimiter(qps=qps, burst=burst)


def test_the_smallest_token_bucket_is_one_token_at_any_positive_rate() -> None:
    limiter = TokenBucketRateLimiter(qps=0.5, burst=1, clock=FakeClock())
    assert [limiter.when("a"), limiter.when("b")] == [0.0, 2.0]


def test_default_controller_limiter_is_exponential_under_the_bucket() -> None:
    limiter = default_controller_rate_limiter(FakeClock())
    assert [limiter.when("k") for _ in range(3)] == pytest.approx([5 * MS, 10 * MS, 20 * MS])
    assert limiter.num_requeues("k") == 3
    limiter.forget("k")
    assert limiter.num_requeues("k") == 0 and limiter.when("k") == pytest.approx(5 * MS)


def test_default_controller_limiter_caps_one_item_at_1000_s() -> None:
    limiter = default_controller_rate_limiter(FakeClock())
    delays = [limiter.when("k") for _ in range(20)]
    assert delays[17] == pytest.approx(5 * MS * 2**17) and delays[18:] == [1000.0, 1000.0]


def test_default_controller_limiter_lets_a_burst_of_100_through_then_10_a_second() -> None:
    limiter = default_controller_rate_limiter(FakeClock())
    delays = [limiter.when(f"item-{i}") for i in range(102)]
    assert delays[:100] == pytest.approx([5 * MS] * 100), "first failures: the item's 5 ms"
    assert delays[100:] == pytest.approx([0.1, 0.2]), "then the bucket's 10 a second"

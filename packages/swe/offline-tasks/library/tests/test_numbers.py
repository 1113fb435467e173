import pytest

from toolbelt.numbers import clamp, digit_sum, gcd, is_prime, lcm, mean, median, percent, primes_up_to


@pytest.mark.parametrize("value,expected", [(-5, 0), (5, 5), (50, 10), (0, 0), (10, 10)])
def test_clamp(value, expected):
    assert clamp(value, 0, 10) == expected


def test_clamp_rejects_inverted_range():
    with pytest.raises(ValueError):
        clamp(1, 5, 0)


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_mean_empty():
    with pytest.raises(ValueError):
        mean([])


def test_median_odd():
    assert median([3, 1, 2]) == 2


def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5


def test_gcd():
    assert gcd(54, 24) == 6
    assert gcd(-12, 18) == 6
    assert gcd(7, 0) == 7


def test_lcm():
    assert lcm(4, 6) == 12
    assert lcm(0, 5) == 0


@pytest.mark.parametrize("n", [2, 3, 5, 13, 97])
def test_is_prime_true(n):
    assert is_prime(n)


@pytest.mark.parametrize("n", [0, 1, 4, 9, 25, 91])
def test_is_prime_false(n):
    assert not is_prime(n)


def test_primes_up_to():
    assert primes_up_to(20) == [2, 3, 5, 7, 11, 13, 17, 19]
    assert primes_up_to(2) == [2]


def test_digit_sum():
    assert digit_sum(12345) == 15
    assert digit_sum(-907) == 16


def test_percent():
    assert percent(1, 3) == 33.33
    assert percent(50, 200) == 25.0

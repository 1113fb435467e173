import pytest

from toolbelt.dates import add_days, day_of_year, days_in_month, days_in_year, is_leap, weekday


@pytest.mark.parametrize("year", [2000, 2024, 1996])
def test_is_leap_true(year):
    assert is_leap(year)


@pytest.mark.parametrize("year", [1900, 2023, 2100])
def test_is_leap_false(year):
    assert not is_leap(year)


def test_days_in_month():
    assert days_in_month(2023, 2) == 28
    assert days_in_month(2024, 2) == 29
    assert days_in_month(2023, 12) == 31
    assert days_in_month(2023, 4) == 30


def test_days_in_month_rejects_bad_month():
    with pytest.raises(ValueError):
        days_in_month(2023, 13)


def test_day_of_year():
    assert day_of_year(2023, 1, 1) == 1
    assert day_of_year(2023, 3, 1) == 60
    assert day_of_year(2024, 12, 31) == 366


def test_days_in_year():
    assert days_in_year(2024) == 366
    assert days_in_year(2023) == 365


def test_add_days():
    assert add_days(2023, 1, 30, 2) == (2023, 2, 1)
    assert add_days(2023, 12, 31, 1) == (2024, 1, 1)
    assert add_days(2024, 2, 28, 1) == (2024, 2, 29)
    assert add_days(2023, 5, 5, 0) == (2023, 5, 5)


def test_weekday():
    assert weekday(2024, 1, 1) == 0
    assert weekday(2000, 2, 29) == 1
    assert weekday(2023, 12, 31) == 6

"""Proleptic Gregorian calendar arithmetic without the datetime module."""

DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def is_leap(year):
    """Gregorian leap year rule."""
    if year % 400 == 0:
        return True
    if year % 100 == 0:
        return False
    return year % 4 == 0


def days_in_month(year, month):
    """Number of days in the month (1-12) of the year."""
    if month < 1 or month > 12:
        raise ValueError("month must be in 1..12")
    if month == 2 and is_leap(year):
        return 29
    return DAYS_IN_MONTH[month - 1]


def day_of_year(year, month, day):
    """1-based ordinal of the date within its year."""
    if day < 1 or day > days_in_month(year, month):
        raise ValueError("day out of range")
    total = day
    for m in range(1, month):
        total += days_in_month(year, m)
    return total


def days_in_year(year):
    """365 or 366."""
    return 366 if is_leap(year) else 365


def add_days(year, month, day, count):
    """The date count days after (year, month, day); count must be non-negative."""
    if count < 0:
        raise ValueError("count must be non-negative")
    while count > 0:
        remaining = days_in_month(year, month) - day
        if count <= remaining:
            return (year, month, day + count)
        count -= remaining + 1
        day = 1
        month += 1
        if month > 12:
            month = 1
            year += 1
    return (year, month, day)


def weekday(year, month, day):
    """Day of the week, 0 = Monday ... 6 = Sunday (Zeller's congruence)."""
    if month < 3:
        month += 12
        year -= 1
    k = year % 100
    j = year // 100
    h = (day + 13 * (month + 1) // 5 + k + k // 4 + j // 4 + 5 * j) % 7
    return (h + 5) % 7

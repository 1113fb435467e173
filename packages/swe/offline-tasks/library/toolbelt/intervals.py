"""Half-open integer intervals [start, end)."""


def normalize(interval):
    """Return the interval with start <= end."""
    start, end = interval
    if start > end:
        return (end, start)
    return (start, end)


def length(interval):
    """Number of integers covered by the interval."""
    start, end = normalize(interval)
    return end - start


def overlaps(first, second):
    """True if two intervals share at least one integer."""
    a_start, a_end = normalize(first)
    b_start, b_end = normalize(second)
    return a_start < b_end and b_start < a_end


def contains(interval, point):
    """True if point lies inside the interval."""
    start, end = normalize(interval)
    return start <= point < end


def merge(intervals):
    """Merge overlapping or touching intervals; the result is sorted."""
    ordered = sorted(normalize(i) for i in intervals)
    merged = []
    for start, end in ordered:
        if merged and start <= merged[-1][1]:
            last_start, last_end = merged[-1]
            merged[-1] = (last_start, max(last_end, end))
        else:
            merged.append((start, end))
    return merged


def total_length(intervals):
    """Number of integers covered by the union of the intervals."""
    return sum(length(i) for i in merge(intervals))


def intersection(first, second):
    """The common part of two intervals, or None."""
    a_start, a_end = normalize(first)
    b_start, b_end = normalize(second)
    start = max(a_start, b_start)
    end = min(a_end, b_end)
    if start >= end:
        return None
    return (start, end)

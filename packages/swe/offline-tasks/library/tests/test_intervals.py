from toolbelt.intervals import contains, intersection, length, merge, normalize, overlaps, total_length


def test_normalize():
    assert normalize((5, 2)) == (2, 5)
    assert normalize((1, 3)) == (1, 3)


def test_length():
    assert length((2, 7)) == 5


def test_overlaps():
    assert overlaps((0, 5), (4, 8))
    assert not overlaps((0, 5), (5, 8))


def test_contains():
    assert contains((0, 5), 0)
    assert contains((0, 5), 4)
    assert not contains((0, 5), 5)


def test_merge_overlapping():
    assert merge([(5, 8), (1, 3), (2, 4)]) == [(1, 4), (5, 8)]


def test_merge_touching():
    assert merge([(1, 3), (3, 6)]) == [(1, 6)]


def test_merge_nested():
    assert merge([(1, 10), (2, 3)]) == [(1, 10)]


def test_total_length():
    assert total_length([(0, 4), (2, 6), (10, 12)]) == 8


def test_intersection():
    assert intersection((0, 5), (3, 9)) == (3, 5)
    assert intersection((0, 2), (2, 4)) is None

import pytest

from toolbelt.seq import chunk, dedupe, flatten, group_by, index_of, rotate, take_while, windows


def test_chunk():
    assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]


def test_chunk_rejects_zero():
    with pytest.raises(ValueError):
        chunk([1], 0)


def test_flatten():
    assert flatten([[1, 2], [], [3]]) == [1, 2, 3]


def test_dedupe_keeps_first():
    assert dedupe([3, 1, 3, 2, 1]) == [3, 1, 2]


def test_windows():
    assert windows([1, 2, 3, 4], 3) == [(1, 2, 3), (2, 3, 4)]
    assert windows([1, 2], 3) == []


@pytest.mark.parametrize("steps,expected", [(1, [4, 1, 2, 3]), (-1, [2, 3, 4, 1]), (4, [1, 2, 3, 4]), (6, [3, 4, 1, 2])])
def test_rotate(steps, expected):
    assert rotate([1, 2, 3, 4], steps) == expected


def test_rotate_empty():
    assert rotate([], 3) == []


def test_take_while():
    assert take_while(lambda x: x < 3, [1, 2, 3, 1]) == [1, 2]


def test_group_by():
    assert group_by(len, ["a", "bb", "c", "dd", "eee"]) == {1: ["a", "c"], 2: ["bb", "dd"], 3: ["eee"]}


def test_index_of():
    assert index_of([5, 6, 7, 6], 6) == 1
    assert index_of([5, 6, 7, 6], 6, start=2) == 3
    assert index_of([5, 6], 9) == -1

import pytest

from toolbelt.matrix import add, identity, multiply, scale, shape, trace, transpose


def test_shape():
    assert shape([[1, 2, 3], [4, 5, 6]]) == (2, 3)
    assert shape([]) == (0, 0)


def test_identity():
    assert identity(3) == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]


def test_transpose():
    assert transpose([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]


def test_add():
    assert add([[1, 2]], [[10, 20]]) == [[11, 22]]


def test_add_rejects_shape_mismatch():
    with pytest.raises(ValueError):
        add([[1]], [[1, 2]])


def test_multiply():
    assert multiply([[1, 2], [3, 4]], [[5, 6], [7, 8]]) == [[19, 22], [43, 50]]


def test_multiply_rectangular():
    assert multiply([[1, 2, 3]], [[1], [2], [3]]) == [[14]]


def test_trace():
    assert trace([[1, 2], [3, 4]]) == 5


def test_scale():
    assert scale([[1, -2]], 3) == [[3, -6]]

"""Lists-of-lists matrix helpers."""


def shape(matrix):
    """(rows, columns)."""
    if not matrix:
        return (0, 0)
    return (len(matrix), len(matrix[0]))


def identity(n):
    """n x n identity matrix."""
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


def transpose(matrix):
    """Rows become columns."""
    rows, cols = shape(matrix)
    return [[matrix[r][c] for r in range(rows)] for c in range(cols)]


def add(first, second):
    """Element-wise sum of two matrices of the same shape."""
    if shape(first) != shape(second):
        raise ValueError("shapes differ")
    return [[a + b for a, b in zip(row_a, row_b)] for row_a, row_b in zip(first, second)]


def multiply(first, second):
    """Matrix product."""
    rows, inner = shape(first)
    inner_b, cols = shape(second)
    if inner != inner_b:
        raise ValueError("inner dimensions differ")
    return [[sum(first[r][k] * second[k][c] for k in range(inner)) for c in range(cols)] for r in range(rows)]


def trace(matrix):
    """Sum of the main diagonal of a square matrix."""
    rows, cols = shape(matrix)
    if rows != cols:
        raise ValueError("matrix is not square")
    return sum(matrix[i][i] for i in range(rows))


def scale(matrix, factor):
    """Every element multiplied by factor."""
    return [[value * factor for value in row] for row in matrix]
